package resource

import (
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	deep := strings.Repeat("[", MaxNestingDepth+2) + strings.Repeat("]", MaxNestingDepth+2)    // levels 0..MaxNestingDepth+1
	atBound := strings.Repeat("[", MaxNestingDepth+1) + strings.Repeat("]", MaxNestingDepth+1) // levels 0..MaxNestingDepth, as parseJSON
	for _, c := range []struct {
		name, in, err string
	}{
		{"envelope", `{"items": [{"a": 1}], "ifMatch": {"Route/shop/cart": 3}}`, ""},
		{"envelope items twice", `{"items": [{"kind": "A"}], "items": [{"kind": "B"}]}`, "items: duplicate key"},
		{"nested in an item", `{"items": [{"spec": {"ports": [], "ports": []}}]}`, "items[0].spec.ports: duplicate key"},
		{"ifMatch key twice", `{"items": [], "ifMatch": {"Route/a/b": 1, "Route/a/b": 2}}`, `ifMatch.Route/a/b: duplicate key`},
		{"same key in sibling objects", `[{"a": 1}, {"a": 2}]`, ""},
		{"trailing", `{"a": 1} {"b": 2}`, "unexpected data after the top-level value"},
		{"truncated", `{"a": [1, 2`, "unexpected EOF"},
		{"depth at bound", atBound, ""},
		{"depth past bound", deep, "nested deeper than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckJSON([]byte(c.in))
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("CheckJSON(%s) = %v, want nil", c.in, err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("CheckJSON(%s) = %v, want an error containing %q", c.in, err, c.err)
			}
		})
	}
}

func FuzzCheckJSON(f *testing.F) {
	f.Add([]byte(`{"items": [{"a": 1}], "items": []}`))
	f.Add([]byte(`[{"a": {"b": [1, {"c": 2, "c": 3}]}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := CheckJSON(b); err == nil {
			// Whatever CheckJSON accepts is one valid JSON value.
			if _, perr := parseJSON(b); perr != nil {
				t.Fatalf("CheckJSON accepted %q, parseJSON refused it: %v", b, perr)
			}
		}
	})
}
