// Package bucket is featurefs's read-only view of an object store: one
// interface (List one '/' level at a time, Stat, Get) with an S3 (and
// S3-compatible: MinIO, Ceph RGW) implementation and a local directory one.
// Every call takes a context; concurrent GETs are bounded per bucket.
package bucket
