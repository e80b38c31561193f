package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/featurefs/featurefs/mountopts"
)

// bindOptions defines on fl the flag of every option of command c in
// mountopts' option table, over o's fields: the values o holds now are the
// defaults -h shows. Typed fields take the flag package's typed flags (-h
// then names their type: string, int, duration).
func bindOptions(fl *flag.FlagSet, o *mountopts.Options, c mountopts.Command) {
	for _, opt := range mountopts.For(c) {
		name, usage := opt.Name, opt.HelpIn(c)
		switch p := opt.Target(o).(type) {
		case *string:
			fl.StringVar(p, name, *p, usage)
		case *bool:
			fl.BoolVar(p, name, *p, usage)
		case *int:
			fl.IntVar(p, name, *p, usage)
		case *int64:
			fl.Int64Var(p, name, *p, usage)
		case *time.Duration:
			fl.DurationVar(p, name, *p, usage)
		case mountopts.Value:
			fl.Var(p, name, usage)
		default:
			panic(fmt.Sprintf("featurefs: option --%s: no flag for %T", name, p))
		}
	}
}

// bindWarmOnly defines on fl the flags of the options of featurefs warm
// that mount lacks (warm's flag set is mount's plus these and its own).
func bindWarmOnly(fl *flag.FlagSet, o *mountopts.Options) {
	only := flag.NewFlagSet("warm", flag.ContinueOnError)
	bindOptions(only, o, mountopts.Warm)
	only.VisitAll(func(f *flag.Flag) {
		if opt := mountopts.Lookup(f.Name); opt != nil && opt.In&mountopts.Mount == 0 {
			fl.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// mountOnly reports whether flag name is one of mount's that warm takes
// only to reject it (warm reads no FUSE tree of its own).
func mountOnly(name string) bool {
	opt := mountopts.Lookup(name)
	return opt != nil && opt.In&mountopts.Mount != 0 && opt.In&mountopts.Warm == 0
}
