package resource

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Seeds live in testdata/fuzz/<Fuzz>/ (the examples, the invalid examples and
// edge cases). Invariants: no panic; an error is a non-empty ErrorList of
// *FieldError with no objects; on success every object validates and
// Decode(Encode(objs)) gives the same objects in both formats.

func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode(data, "fuzz.yaml")
		if err != nil {
			checkErrorList(t, err)
			if objs != nil {
				t.Fatalf("Decode returned %d objects with an error", len(objs))
			}
			return
		}
		checkRoundTrip(t, objs)
	})
}

func FuzzDecodeJSONObject(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := DecodeJSONObject(data)
		if err != nil {
			checkErrorList(t, err)
			if o != nil {
				t.Fatal("DecodeJSONObject returned an object with an error")
			}
			return
		}
		checkRoundTrip(t, []*Object{o})
	})
}

func checkErrorList(t *testing.T, err error) {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("error %T %q is not a non-empty ErrorList", err, err)
	}
	for _, e := range list {
		var fe *FieldError
		if !errors.As(e, &fe) || fe.Object == "" || fe.Detail == "" {
			t.Fatalf("list entry %T %q is not a complete *FieldError", e, e)
		}
	}
}

func checkRoundTrip(t *testing.T, objs []*Object) {
	t.Helper()
	for _, o := range objs {
		if err := Validate(o); err != nil {
			t.Fatalf("decoded object does not validate: %v", err)
		}
	}
	for _, format := range []string{"yaml", "json"} {
		out, err := Encode(objs, format)
		if err != nil {
			t.Fatalf("Encode %s: %v", format, err)
		}
		back, err := Decode(out, "encoded")
		if err != nil {
			t.Fatalf("Decode(Encode %s): %v\n%s", format, err, out)
		}
		if diff := cmp.Diff(objs, back, roundTripOpts); diff != "" {
			t.Fatalf("round trip %s (-want +got):\n%s\n%s", format, diff, out)
		}
	}
}
