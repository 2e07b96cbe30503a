package resource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The examples directory is the API.md examples as one self-consistent set: it
// must decode, and ValidateSet must find nothing at all (not even a warning that
// something is not enforced).
func TestExamples(t *testing.T) {
	objs, err := DecodePath("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	kindsSeen := map[string]bool{}
	for _, o := range objs {
		kindsSeen[o.Kind] = true
		if o.Kind != KindMeshConfig && o.Metadata.Namespace != "shop" {
			t.Errorf("%s: want namespace shop", o)
		}
	}
	for _, k := range Kinds() {
		if !kindsSeen[k.Kind] {
			t.Errorf("no example of kind %s", k.Kind)
		}
	}
	errs, warnings := ValidateSet(objs)
	if len(errs) != 0 {
		t.Errorf("ValidateSet: errors %v", errs)
	}
	// Since issue #9 every kind and field the examples use is enforced.
	if len(warnings) != 0 {
		t.Errorf("ValidateSet: warnings %q, want none", warnings)
	}
}

func TestInvalidExamples(t *testing.T) {
	_, err := DecodePath("../../examples/invalid")
	if err == nil {
		t.Fatal("examples/invalid decoded without errors")
	}
	want := []string{
		"Override/shop/block-all: spec.ttl: 2h exceeds the limit of 1h0m0s",
		"Override/shop/block-all: spec.action: required",
		`MeshConfig/mesh: metadata.name: must be "default": there is one MeshConfig`,
		"Route/shop/cart: spec.http[0].match[1].path.regex: invalid RE2: missing closing )",
		"Route/shop/reviews: spec.http[0].match[0].headers[end-user]: exactly one of exact, prefix, regex, present required",
		"Route/shop/reviews: spec.http[0].route: weights sum to 90, must be 100",
		"Service/shop/details: status: " + ErrStatusSetByPilot,
		"Service/shop/ratings: spec.ports[0].port: expected an integer, got string",
		"Service/shop/ratings: spec.selectr: unknown field",
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}
