package mountopts

import "testing"

// TestMemoryLimitKeepsGivenDefaults: a bound given in the config file
// stays what it was given under --memory-limit even when that is its
// default's value (whether it was given decides, not its value); bounds
// not given are sized from the limit. Options marked given (MarkGiven,
// as the commands do for each flag set) behave alike.
func TestMemoryLimitKeepsGivenDefaults(t *testing.T) {
	d := Default()
	o := Default()
	if err := o.LoadFile(writeConfig(t, "memory-limit: 512MiB\nmetadata-cache-size: 256MiB\ndecode-memory: 1GiB\n")); err != nil {
		t.Fatal(err)
	}
	if o.MetadataCacheSize != d.MetadataCacheSize || o.DecodeMemory != d.DecodeMemory {
		t.Fatalf("the file's values are not the defaults: metadata %d, decode %d", o.MetadataCacheSize, o.DecodeMemory)
	}
	o.ApplyMemoryLimit()
	if o.MetadataCacheSize != 256*MiB || o.DecodeMemory != GiB || o.FetchMemory != 32*MiB {
		t.Errorf("config file: metadata %s, decode %s, fetched objects %s; want the 256MiB and 1GiB given and 32MiB (a sixteenth of 512MiB)",
			FormatSize(o.MetadataCacheSize), FormatSize(o.DecodeMemory), FormatSize(o.FetchMemory))
	}

	o = Default()
	o.MemoryLimit = 512 * MiB
	o.MarkGiven("fetch-memory") // --fetch-memory 64MiB, the default
	if !o.Given("fetch-memory") || o.Given("decode-memory") {
		t.Fatalf("Given: fetch-memory %v, decode-memory %v; want true, false", o.Given("fetch-memory"), o.Given("decode-memory"))
	}
	o.ApplyMemoryLimit()
	if o.FetchMemory != d.FetchMemory || o.MetadataCacheSize != 128*MiB || o.DecodeMemory != 64*MiB {
		t.Errorf("marked: fetched objects %s, metadata %s, decode %s; want the 64MiB given, 128MiB and 64MiB",
			FormatSize(o.FetchMemory), FormatSize(o.MetadataCacheSize), FormatSize(o.DecodeMemory))
	}
}
