package mountopts

import (
	"fmt"
	"reflect"
	"time"
)

// value is how one option of the table reaches its field in Options: its
// default, its flag, its config-file key and its own check.
type value interface {
	// reset sets the field to its default.
	reset(o *Options)
	// target is what a flag of the option sets: a *string, *bool, *int,
	// *int64 or *time.Duration into o, or a [Value] over o.
	target(o *Options) any
	// fileType is the Go type the config file's key decodes into: a
	// pointer, slice or map, nil when the key is not given.
	fileType() reflect.Type
	// load sets the field from the config file's value v (of fileType,
	// not nil); dir is the file's directory.
	load(o *Options, v reflect.Value, key, dir string) error
	// check returns the problem of the field's value alone, or nil.
	check(o *Options) error
}

// kind says how a field[T] is written on a command line and in the config
// file, where T alone does not.
type kind int

const (
	plainKind    kind = iota // as T: flag's own StringVar, BoolVar, IntVar, Int64Var
	sizeKind                 // an int64 byte count written as ParseSize reads it
	durationKind             // a time.Duration written as time.ParseDuration reads it
)

// field is a value of Go type T: string, bool, int, int64 or
// time.Duration.
type field[T comparable] struct {
	get  func(*Options) *T
	def  func() T
	kind kind
	// ok returns the problem of a value, or nil; nil: any value.
	ok func(T) error
}

func (f field[T]) reset(o *Options) { *f.get(o) = f.def() }

func (f field[T]) target(o *Options) any {
	if f.kind == sizeKind {
		return sizeValue{any(f.get(o)).(*int64)}
	}
	return f.get(o)
}

func (f field[T]) fileType() reflect.Type {
	if f.kind != plainKind {
		return reflect.TypeFor[*string]() // sizes and durations are written as text
	}
	return reflect.TypeFor[*T]()
}

func (f field[T]) load(o *Options, v reflect.Value, key, _ string) error {
	p := any(f.get(o))
	switch f.kind {
	case sizeKind:
		n, err := ParseSize(*v.Interface().(*string))
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		*p.(*int64) = n
	case durationKind:
		d, err := time.ParseDuration(*v.Interface().(*string))
		if err != nil {
			return fmt.Errorf("%s: %w (want e.g. 90s, 5m, 1h)", key, err)
		}
		*p.(*time.Duration) = d
	default:
		*f.get(o) = *v.Interface().(*T)
	}
	return nil
}

func (f field[T]) check(o *Options) error {
	if f.ok == nil {
		return nil
	}
	return f.ok(*f.get(o))
}

// custom is a value with its own flag parsing (a list, a repeatable flag)
// and, when in the config file, its own loading.
type custom struct {
	// def sets the default (nil: the zero value).
	def func(*Options)
	// set parses one use of the flag; show renders the value (nil: "").
	set  func(*Options, string) error
	show func(*Options) string
	// file is the config file's Go type and loadFile its loading; nil
	// for a flag alone.
	file     reflect.Type
	loadFile func(o *Options, v reflect.Value, dir string) error
	ok       func(*Options) error
}

func (c custom) reset(o *Options) {
	if c.def != nil {
		c.def(o)
	}
}

func (c custom) target(o *Options) any {
	v := funcValue{set: func(s string) error { return c.set(o, s) }}
	if c.show != nil {
		v.show = func() string { return c.show(o) }
	}
	return v
}

func (c custom) fileType() reflect.Type { return c.file }

func (c custom) load(o *Options, v reflect.Value, _, dir string) error { return c.loadFile(o, v, dir) }

func (c custom) check(o *Options) error {
	if c.ok == nil {
		return nil
	}
	return c.ok(o)
}

// Value is an option's text form on a command line (the shape of the flag
// package's flag.Value): String renders it, Set parses one use of the flag.
type Value interface {
	String() string
	Set(string) error
}

// sizeValue is the Value of a byte size in ParseSize's forms.
type sizeValue struct{ p *int64 }

func (s sizeValue) String() string {
	if s.p == nil {
		return ""
	}
	return FormatSize(*s.p)
}

func (s sizeValue) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

// funcValue is a Value calling set for each use.
type funcValue struct {
	show func() string
	set  func(string) error
}

func (f funcValue) String() string {
	if f.show == nil {
		return ""
	}
	return f.show()
}

func (f funcValue) Set(v string) error { return f.set(v) }
