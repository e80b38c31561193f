// Package features is featurefs's read path, FUSE-free: what a read of
// MOUNT/features/<model>/<layer>/<name>.npy does below the FUSE tree, and
// what the feature server (fs/remote) does for each item it is asked for.
//
// # Data flow
//
// A read (Pipeline.Read, Pipeline.Feature) goes one way, top to bottom:
//
//  1. the negative cache: an object version known bad (not an image,
//     corrupt, too large) fails at once, until NegativeTTL has passed;
//  2. in-flight sharing: concurrent reads of one feature share one run,
//     detached from the readers (fs/internal/inflight), so that an
//     interrupted reader that retries finds it still going;
//  3. the local cache ([Cache]): a hit of the layer's size is the answer;
//  4. extraction ([Extractor]), which fetches the object from the bucket
//     (an ETag other than the listed one is ErrObjectChanged) at Foreground
//     priority; a bad object is recorded in the negative cache;
//  5. the cache write, behind the read: the feature is queued (bounded in
//     bytes) and the reader answered at once; a few writer goroutines
//     compress and store it, and lookups find it in the queue until then
//     (cachewriter.go). Close waits for the queue.
//
// Read, the tree's call, also handles an object overwritten since it was
// listed: it stats the object, serves the new version and remembers it
// (NewerVersion) for the tree's later opens.
//
// Prefetch (Touch) and warm-up (Warm) walk the bucket and send what is not
// cached to step 4 at Background priority, within one budget of count and
// bytes. The bucket and the extractor are wrapped so that every call is
// counted once; Stats (its part of the figures.Stats of
// MOUNT/.featurefs/stats, of GET /v1/stats and of the Prometheus metrics)
// reads them, and its Journal keeps the recent errors. Errors become
// errnos, and are counted by kind, in the tree (package fs), not here.
//
// Predictions (predict.go) read a model's last layer through Read and
// compute the softmax top-k here: PredictAll for the tree's
// predictions.jsonl files, PredictTree for featurefs warm --predictions,
// both within one budget shared by every caller.
package features
