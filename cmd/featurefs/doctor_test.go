package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor"
)

// snakeCase is a JSON key in the stats file's style: lower-case words
// joined by underscores.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys calls bad with the path of every key of the JSON value v
// (decoded into any) that is not snake_case, and returns how many keys
// it walked.
func jsonKeys(v any, path string, bad func(string)) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			n++
			if !snakeCase.MatchString(k) {
				bad(path + "." + k)
			}
			n += jsonKeys(e, path+"."+k, bad)
		}
	case []any:
		for _, e := range v {
			n += jsonKeys(e, path+"[]", bad)
		}
	}
	return n
}

// fillAll sets every field of v, recursively, to a value that is not its
// zero (strings "x", numbers 1, true, one-element slices), so that no
// omitempty field is left out of its JSON.
func fillAll(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillAll(v.Index(0))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i))
			}
		}
	}
}

// TestDoctorJSONKeysAreSnakeCase: every key of featurefs doctor --json is
// snake_case, as the stats file's are: the report this machine gives, and
// a Diagnosis with every field set (so that keys this machine leaves out,
// a GPU's or an omitted error's, are held too). At 1942f8f the report mixed
// Go field names (ort.Path, ort.Version, ort.APIOK, ort.Providers,
// cuda_libs[].Name) with snake_case.
func TestDoctorJSONKeysAreSnakeCase(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := doctor([]string{"--json"}, &out, &errOut); code != exitOK {
		t.Fatalf("doctor --json: exit %d\n%s", code, errOut.String())
	}
	var full extractor.Diagnosis
	fillAll(reflect.ValueOf(&full).Elem())
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{"doctor --json": out.Bytes(), "a Diagnosis with every field set": b} {
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, doc)
		}
		n := jsonKeys(v, "", func(k string) { t.Errorf("%s: key %s is not snake_case", name, k) })
		if n < 10 {
			t.Errorf("%s: %d keys walked, want at least 10:\n%s", name, n, doc)
		}
	}
}

// buildFakeNVJPEG builds the extractor's fake libcudart.so.13 and
// libnvjpeg.so.13 (extractor/testdata/fakenvjpeg) into a new directory.
func buildFakeNVJPEG(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs("../../extractor")
	if err != nil {
		t.Fatal(err)
	}
	cc := func(args ...string) {
		args = append([]string{"-shared", "-fPIC", "-O1", "-I", src}, args...)
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("building the fake nvJPEG (needs gcc): gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rt := filepath.Join(dir, "libcudart.so.13")
	cc("-o", rt, filepath.Join(src, "testdata/fakenvjpeg/fake_cudart.c"))
	cc("-o", filepath.Join(dir, "libnvjpeg.so.13"), filepath.Join(src, "testdata/fakenvjpeg/fake_nvjpeg.c"), rt)
	return dir
}

// doctor reports nvJPEG: its version when the library loads (the fake's
// nvjpegGetProperty, no GPU), found through FEATUREFS_CUDA_LIB_DIR; or one
// line naming what is missing and where it was looked for.
func TestDoctorReportsNVJPEG(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("FEATUREFS_CUDA_LIB_DIR", empty)
	var out, errOut bytes.Buffer
	if code := doctor([]string{"--json"}, &out, &errOut); code != exitOK {
		t.Fatalf("doctor --json: exit %d\n%s", code, errOut.String())
	}
	var d extractor.Diagnosis
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if nv := d.NVJPEG; nv.Version != "" || !strings.HasPrefix(nv.Missing, "libnvjpeg.so.13 not found (looked in "+empty) {
		t.Errorf("without nvJPEG: %+v, want missing naming libnvjpeg.so.13 and %s", nv, empty)
	}
	out.Reset()
	doctor(nil, &out, &errOut)
	if !strings.Contains(out.String(), "\n  nvJPEG: libnvjpeg.so.13 not found (looked in "+empty) ||
		!strings.Contains(out.String(), "): --decode gpu decodes on the CPU\n") {
		t.Errorf("text report without nvJPEG:\n%s", out.String())
	}

	dir := buildFakeNVJPEG(t)
	t.Setenv("FEATUREFS_CUDA_LIB_DIR", dir)
	out.Reset()
	if code := doctor([]string{"--json"}, &out, &errOut); code != exitOK {
		t.Fatalf("doctor --json: exit %d\n%s", code, errOut.String())
	}
	d = extractor.Diagnosis{}
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	want := extractor.NVJPEGStatus{Path: filepath.Join(dir, "libnvjpeg.so.13"), CUDARTPath: filepath.Join(dir, "libcudart.so.13"), Version: "13.0.1"}
	if d.NVJPEG != want {
		t.Errorf("with the fake nvJPEG: %+v, want %+v", d.NVJPEG, want)
	}
	var keys map[string]any
	if err := json.Unmarshal(out.Bytes(), &keys); err != nil {
		t.Fatal(err)
	}
	if nv, ok := keys["nvjpeg"].(map[string]any); !ok || nv["version"] != "13.0.1" || nv["cudart_path"] != want.CUDARTPath {
		t.Errorf("doctor --json's nvjpeg section: %v", keys["nvjpeg"])
	}
	out.Reset()
	doctor([]string{"--cuda-lib-dir", dir}, &out, &errOut)
	if line := "\n  nvJPEG 13.0.1 loads (" + want.Path + "): --decode gpu can use it\n"; !strings.Contains(out.String(), line) {
		t.Errorf("text report lacks %q:\n%s", line, out.String())
	}
}
