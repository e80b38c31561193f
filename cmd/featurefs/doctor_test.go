package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
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
