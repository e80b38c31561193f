package remote

import (
	"reflect"
	"testing"
)

// The client's models are what the servers list, as the contract's
// api.Model: nothing is made up for the file the servers loaded (no Path,
// input or fixed batch: the model has no file on the mount).
func TestClientModelsAreTheServers(t *testing.T) {
	ts := startServer(t, map[string]string{"a.jpg": "x"}, nil)
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	want := ts.Ex.Models()
	got := c.Extractor().Models()
	if len(got) != len(want) || len(got) != 1 {
		t.Fatalf("client models %d, server models %d; want 1", len(got), len(want))
	}
	g, w := got[0], want[0]
	if g.Name != w.Name || g.Digest != w.Digest || g.Preprocess.Key() != w.Preprocess.Key() || !reflect.DeepEqual(g.Aliases, w.Aliases) {
		t.Errorf("client model %+v, server's %+v", g, w)
	}
	if !reflect.DeepEqual(g.Layers, w.Layers) {
		t.Errorf("client layers %+v, server's %+v", g.Layers, w.Layers)
	}
	if g.Path != "" || g.Input != "" || g.InputShape != nil || g.FixedBatch != 0 {
		t.Errorf("client model has file fields it cannot know: path %q, input %q %v, fixed batch %d", g.Path, g.Input, g.InputShape, g.FixedBatch)
	}
}
