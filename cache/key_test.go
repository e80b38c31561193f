package cache

import (
	"bytes"
	"reflect"
	"testing"
)

func TestKeyIDCoversEveryField(t *testing.T) {
	base := testKey(1)
	if got := base.ID(); len(got) != IDLen || !bytes.Equal(got, testKey(1).ID()) {
		t.Fatalf("ID() = %x; want %d bytes, stable for equal keys", got, IDLen)
	}
	// Changing any one field must change the ID.
	v := reflect.ValueOf(&base).Elem()
	for f := range v.NumField() {
		k := base
		reflect.ValueOf(&k).Elem().Field(f).SetString(v.Field(f).String() + "x")
		if bytes.Equal(k.ID(), base.ID()) {
			t.Errorf("changing %s does not change the ID", v.Type().Field(f).Name)
		}
	}
	// Fields are length-prefixed: moving bytes between fields changes the ID.
	a := Key{Source: "ab", Object: "c"}
	b := Key{Source: "a", Object: "bc"}
	if bytes.Equal(a.ID(), b.ID()) {
		t.Error("keys that differ only in field boundaries share an ID")
	}
}

func TestChangedETagOrModelMisses(t *testing.T) {
	s := openTest(t, t.TempDir(), 64<<20)
	k := testKey(7)
	v := testValue(7, 8000)
	if err := s.Put(k, v); err != nil {
		t.Fatal(err)
	}
	changed := map[string]Key{}
	k2 := k
	k2.ETag = `"a-new-etag"`
	changed["ETag"] = k2
	k3 := k
	k3.ModelDigest = "fedcba9876543210"
	changed["ModelDigest"] = k3
	k4 := k
	k4.Layer = "/layer4/layer4.0/relu_2/Relu_output_0"
	changed["Layer"] = k4
	k5 := k
	k5.DType = "float16"
	changed["DType"] = k5
	for field, ck := range changed {
		if got, ok, err := s.Get(ck); ok || err != nil || got != nil {
			t.Errorf("Get with a changed %s = ok %v, err %v; want a miss", field, ok, err)
		}
		if s.Has(ck) {
			t.Errorf("Has with a changed %s = true", field)
		}
	}
	if got, ok, _ := s.Get(k); !ok || !bytes.Equal(got, v) {
		t.Fatal("the unchanged key no longer hits")
	}
	if st := s.Stats(); st.Misses != int64(len(changed)) || st.Hits != 1 {
		t.Fatalf("Stats = %+v; want %d misses, 1 hit", st, len(changed))
	}
}
