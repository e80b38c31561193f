package naming

import (
	"encoding/base64"
	"unicode/utf8"
)

// Generated is a file featurefs makes itself in a directory that also
// shows the bucket's names: augment.jsonl in every directory of a view
// tree, predictions.jsonl in every directory under predictions/<model>/
// (and the layers table in features/<model>/, where the bucket shows no
// name). Its value is the file's usual name.
//
// One rule for all of them, so that a generated name never hides a name
// from the bucket: the bucket's entry wins. A generated
// file is shown under its usual name unless the directory shows an entry
// of that name from the bucket (a prefix, an archive's directory, an
// archive's sidecar); then that entry keeps the name and the generated
// file is shown under Moved, the shortened form of its usual name
// (Shortened: "augment.jsonl~" and 16 hex digits). No name from the
// bucket has that form (a name that has it is shortened itself: Usable),
// so the moved file meets nothing. featurefs extract --augment lays its
// augment.jsonl files out by the same rule.
type Generated string

// Name is the name g is shown under in a directory where taken reports
// whether the bucket shows an entry called g there.
func (g Generated) Name(taken bool) string {
	if taken {
		return g.Moved()
	}
	return string(g)
}

// Moved is the name g takes when an entry from the bucket has its usual
// name: Shortened(g, "").
func (g Generated) Moved() string { return Shortened(string(g), "") }

// Is reports whether name is one g can be shown under (its usual or its
// moved name): a lookup of such a name must know whether the bucket
// takes the usual one to answer it.
func (g Generated) Is(name string) bool { return name == string(g) || name == g.Moved() }

// RawName is what a JSON line that names a file (augment.jsonl's "file")
// carries beside the name so that the name can be found again: "" when
// the name is valid UTF-8 (a JSON string holds it exactly), else the
// standard base64 of its bytes. A JSON string cannot hold bytes that are
// not UTF-8 (encoding/json writes U+FFFD for each, which names no file).
func RawName(name string) string {
	if utf8.ValidString(name) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(name))
}
