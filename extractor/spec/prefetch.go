package spec

// PrefetchMode says what a reader's first touch of a layer directory
// schedules in the background (--prefetch). The flag and the config file
// store the text given; mountopts.Options.Validate accepts only the three
// modes below, so that a validated Options carries a mode that needs no
// parsing again.
type PrefetchMode string

const (
	// PrefetchOff extracts only what readers read.
	PrefetchOff PrefetchMode = "off"
	// PrefetchDir schedules the images of each directory a reader touches
	// (not its subdirectories).
	PrefetchDir PrefetchMode = "dir"
	// PrefetchTree schedules every image under the layer directory a
	// reader first touches (the default).
	PrefetchTree PrefetchMode = "tree"
)

// Valid reports whether m is off, dir or tree.
func (m PrefetchMode) Valid() bool {
	return m == PrefetchOff || m == PrefetchDir || m == PrefetchTree
}
