// Package remote is featurefs's near-data mode (docs/SERVE.md): a feature
// server next to the object store and a client for the training host.
//
// # Data flow
//
// The server (Server, behind `featurefs serve`) sits on a features.Pipeline
// over the store's bucket, the extraction service and a feature cache (the
// caller opens them and the pipeline, NewServer takes the pipeline; no FUSE
// tree), and answers the HTTP API: listings and stats straight from the
// bucket, features through features.Pipeline.Feature — the same path as a
// read of a mounted file (cache, else fetch + extract, then store).
//
// The client (Client, behind `featurefs mount --remote`) offers the servers
// as a bucket.Bucket (Client.Bucket: List and Stat) and a features.Extractor
// (Client.Extractor), so an ordinary pipeline and fs.FS with its own local cache mount
// them. Each object key is routed to one server by rendezvous hashing
// (Rank); concurrent Extract calls for one server are gathered into POST
// /v1/batch requests, whose answers stream back framed, in completion order.
//
// # Files
//
// protocol.go is the wire format both sides share. The server is server.go
// (and split_server.go for split execution's endpoints); the client is
// client.go (Dial), routing.go (rendezvous hashing, failover), batch.go
// (queues and batches), wire.go (HTTP, frames, the token) and adapter.go
// (Bucket and Extractor, what a mount uses); split.go runs part of a
// model on the mount.
//
// # Failures
//
// A server silent for ClientConfig.Timeout (no response, frame or heartbeat:
// the server sends heartbeats while it computes) fails the calls waiting on
// it with ErrUnavailable, which the mount answers with EIO; features in the
// mount's cache are still served, and listings fall back to the last page
// seen. Per-item errors in a batch keep their kind across the wire: a bad
// image is an *extractor.ImageError (cached negatively by the mount), a
// missing object matches bucket.ErrNotFound (ENOENT).
//
// # Security
//
// Every /v1/ request carries a bearer token (compared in constant time,
// never logged); TLS is optional. Request bodies, batch sizes and concurrent
// work are bounded on the server. The client trusts no number a server
// sends (limits.go): models past its caps are refused one by one, and a
// frame's length is checked against its item's .npy size before anything
// is allocated for it (readBatch).
package remote
