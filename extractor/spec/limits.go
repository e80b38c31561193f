package spec

// DefaultMaxObjectSize is the largest object fetched when no limit is
// given (--max-object-size): 256 MiB. mountopts, fs/bucket and
// fs/features read it from here.
const DefaultMaxObjectSize int64 = 256 << 20

// DefaultFetchMemory is the default budget of fetched objects
// (--fetch-memory): the bytes of the objects fetched and not yet decoded
// that the workers may hold at once, 64 MiB.
const DefaultFetchMemory int64 = 64 << 20

// DefaultDecodeMemory is the default decode budget (--decode-memory): the
// bytes that the images being decoded at once may hold, 1 GiB.
const DefaultDecodeMemory int64 = 1 << 30
