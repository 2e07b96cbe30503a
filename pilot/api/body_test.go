package api

import (
	"errors"
	"strings"
	"testing"
)

// TestEnvelopeDuplicateKeys: a repeated key anywhere in a JSON body is a 400
// naming it, never "the last one wins" (issue #11: {"items": A, "items": B}
// applied B and dropped A).
func TestEnvelopeDuplicateKeys(t *testing.T) {
	svc := func(name string) string {
		return `{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","metadata":{"name":"` + name + `","namespace":"shop"},"spec":{"ports":[{"name":"http","port":80}]}}`
	}
	for _, c := range []struct{ name, body, want string }{
		{"items twice", `{"items":[` + svc("a") + `],"items":[` + svc("b") + `]}`, "items: duplicate key"},
		{"ifMatch twice", `{"items":[` + svc("a") + `],"ifMatch":{"Service/shop/a":1},"ifMatch":{}}`, "ifMatch: duplicate key"},
		{"inside an item", `{"items":[{"apiVersion":"mesh.weft.dev/v1alpha1","kind":"Service","kind":"Route","metadata":{"name":"a"},"spec":{}}]}`, "items[0].kind: duplicate key"},
		{"in a list body", `[` + svc("a") + `,{"kind":"Service","metadata":{"name":"b","name":"c"}}]`, "[1].metadata.name: duplicate key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := applyMutations([]byte(c.body), "", 100)
			if err == nil || !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("applyMutations = %v, want a bad request naming %q", err, c.want)
			}
		})
	}
	if muts, err := applyMutations([]byte(`{"items":[`+svc("a")+`,`+svc("b")+`]}`), "", 100); err != nil || len(muts) != 2 {
		t.Fatalf("a clean envelope: %d mutations, %v", len(muts), err)
	}
}
