// Package mountopts holds every setting of a featurefs mount in one
// documented struct, [Options], with its defaults ([Default]), a YAML config
// file ([Options.LoadFile]) and a [Options.Validate] that answers with a
// message a user can act on.
//
// # The option table
//
// Each option is written once, as a row of [Table] (table.go, like
// rclone's fs.Option): its flag, config key, help, the commands that take
// it, its default and its own check. The flags of every command
// (cmd/featurefs binds them from [For]), the config file's keys, [Default]
// and the per-option part of Validate all come from it; Validate itself
// keeps only the rules that tie options together.
//
// # Precedence
//
// Defaults, then the config file, then command-line flags: cmd/featurefs
// applies the file to [Default] and binds its flags on top, so a flag always
// wins over the file. Flags are bound in cmd/ only; this package knows
// nothing of the flag package ([Option.Target] hands cmd/ the field to
// bind).
//
// # Config file
//
//	models:
//	  resnet50:
//	    path: /models/resnet50.onnx
//	    preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
//	    aliases: {pool: layer18}
//	endpoint-url: http://127.0.0.1:9000
//	cache-size: 20GiB
//	metadata-ttl: 2m
//
// Option keys are the flag names without the leading dashes. Sizes take the
// forms [ParseSize] accepts, durations Go's (90s, 5m, 1h30m).
package mountopts
