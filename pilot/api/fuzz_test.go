package api

import (
	"testing"
)

// FuzzApplyBody feeds arbitrary bodies and If-Match headers to the apply parser:
// it must never panic, and whatever it accepts must be well-formed mutations.
func FuzzApplyBody(f *testing.F) {
	seeds := []struct{ body, ifMatch string }{
		{"apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: a, namespace: b}\nspec:\n  ports: [{name: http, port: 80}]\n", ""},
		{`[{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"name":"http","port":80}]}}]`, "1"},
		{`{"items":[{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"name":"h","port":1}]}}],"ifMatch":{"Service/default/a":0}}`, ""},
		{`{"items":[],"ifMatch":{"x":-1}}`, `"3"`},
		{"---\n---\n", "W/\"1\""},
		{"[", "-1"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.ifMatch)
	}
	f.Fuzz(func(t *testing.T, body []byte, ifMatch string) {
		muts, err := applyMutations(body, ifMatch, 100)
		if err != nil {
			return
		}
		if len(muts) == 0 || len(muts) > 100 {
			t.Fatalf("accepted %d mutations", len(muts))
		}
		seen := map[string]bool{}
		for _, m := range muts {
			if m.Object == nil {
				t.Fatal("accepted a nil object")
			}
			k := m.Object.Key().String()
			if seen[k] {
				t.Fatalf("accepted %s twice", k)
			}
			seen[k] = true
			if m.IfMatch != nil && *m.IfMatch < 0 {
				t.Fatalf("accepted negative If-Match %d", *m.IfMatch)
			}
		}
	})
}
