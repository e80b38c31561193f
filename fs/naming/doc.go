// Package naming holds the one rule that turns object keys into feature file
// names (below, "The rule"): which keys are images (by extension, in any
// ASCII case), an image's short name (its extension replaced by .npy), its
// long name (.npy appended), the shortened name of what cannot be shown as
// it is, and the resolution of clashes between them. The FUSE tree lists
// and looks up names through it (Resolver, Rule.Probe, Rule.Resolve) and the
// feature store names its objects through it (Rule.StoreName).
//
// It is FUSE-free and cgo-free, and imports nothing of featurefs but the
// bucket's object and page types and the image-extension match of
// extractor/spec.
//
// # The rule
//
// Only objects whose extension is an image extension (in any ASCII case)
// are shown. Every such object is shown under exactly one name, names in a
// directory are distinct and at most 255 bytes (NAME_MAX), and a name
// depends only on the set of keys, never on how the listing was paged. An
// image object with base name B = S.ext is named:
//
//   - S.npy (its short name) if it is the only image of stem S whose
//     extension is all lower or all upper case, its own extension is so too,
//     S is not empty, no image object's base name is S (that one's long name
//     is S.npy), no directory is called S.npy, and S.npy fits;
//   - else B.npy (its long name: a.jpg.npy and a.png.npy for a.jpg and
//     a.png; a.Png.npy for a.Png; .jpg.npy for .jpg), unless a directory is
//     called B.npy or it does not fit;
//   - else the shortened name: B cut at a UTF-8 boundary to fit, "~", the
//     first 16 hex digits of the SHA-256 of B, ".npy".
//
// A directory keeps its name unless it is over 255 bytes, when it is
// shortened the same way (without .npy). A name of the shortened form
// ("~" and 16 lower-case hex digits at the end, or before .npy) is reserved:
// a directory or file whose own name has it is shortened too, so shortened
// names collide with nothing (two could only if SHA-256 prefixes of 64 bits
// did). Prefix components that are empty, "." or ".." are not shown. Each
// name other than the short one, a sibling's long name or a mixed-case
// extension's long name is logged once at WARN with the key and why.
//
// Listings are sorted by key, so every key that decides the names of stem S
// (S.<ext> in any case, the directories S.npy/ and S.<ext>.npy/) lies
// between S. and S.<largest extension>.npy/, and the image key S before
// them: an object's name is decided once a page reaching past that bound
// (or the end of the listing) has been read, remembering only the image
// keys and X.npy directories that are prefixes of the keys still to come,
// so what waits is bounded by the key length, not the directory size.
// Lookups that cannot be answered from a listing Stat the keys and list the
// prefixes that decide the name (S.<ext> in lower and upper case for each
// extension, the image key S, the directories S.npy and B.npy) and apply the
// same rule to what exists; a shortened name cannot be reversed and is
// looked up in a complete listing of its directory.
//
// Archives (fs/archive, --archives): the source lists an archive NAME.tar
// or NAME.zip as the prefix NAME.tar/, shown as the directory NAME unless
// a prefix NAME/ or another archive of that NAME is beside it (each then
// keeps its own name; a real prefix NAME.tar/, no archive, always keeps its
// name: bucket.Page.Archives tells them apart; NAME.tar/ sorts before NAME/,
// so it waits until the listing has passed NAME/, as a stem's images do); a
// lookup of NAME also lists NAME.<ext>/ for each archive extension (and,
// inside an archive, Stats NAME: a plain file). An archive's sidecar members
// (bucket.Object.Plain) are plain files of their own name, never a name
// ending in .npy.
//
// Generated files (augment.jsonl in a view directory, predictions.jsonl
// under predictions/, the arrays beside a directory, the layers table)
// never hide a name from the bucket, by one rule (Generated): where a
// directory shows an entry from the bucket of the generated file's name,
// the entry keeps it and the file is listed under the shortened form of
// its name (augment.jsonl~515fabe7447a63f7,
// predictions.jsonl~73a657540c708401), which no bucket name is shown
// under. A line of augment.jsonl gives a name that is not UTF-8 also as
// its bytes in base64 ("file_b64": RawName).
package naming
