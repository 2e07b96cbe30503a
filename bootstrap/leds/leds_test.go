package leds

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNames(t *testing.T) {
	c := Collection("outbound|80||a.b.svc.cluster.local", "eu", "", "")
	if want := "xdstp://weft/envoy.config.endpoint.v3.LbEndpoint/outbound|80||a.b.svc.cluster.local/eu,,/*"; c != want {
		t.Fatalf("Collection = %q, want %q", c, want)
	}
	if err := CheckCollection(c); err != nil {
		t.Fatal(err)
	}
	if p := CollectionPrefix("outbound|80||a.b.svc.cluster.local"); !strings.HasPrefix(c, p) || strings.HasPrefix(Collection("outbound|80||a.b.svc.cluster.local.x", "", "", ""), p) {
		t.Fatalf("CollectionPrefix = %q: not the prefix of exactly its cluster's collections", p)
	}
	e := Endpoint(c, "10.0.0.1:80")
	if got, ok := CollectionOf(e); !ok || got != c {
		t.Fatalf("CollectionOf(%q) = %q, %v; want %q", e, got, ok, c)
	}
	// Segments cannot hold a '/', so a cluster or zone with one cannot make
	// a collection whose endpoints another collection's prefix claims.
	nested := Collection("a/b", "r/1", "z,2", "%")
	if want := "xdstp://weft/envoy.config.endpoint.v3.LbEndpoint/a%2Fb/r%2F1,z%2C2,%25/*"; nested != want {
		t.Fatalf("Collection = %q, want %q", nested, want)
	}
	if strings.HasPrefix(Endpoint(nested, "1.2.3.4:5"), strings.TrimSuffix(Collection("a", "", "", ""), "*")) {
		t.Fatal("an escaped cluster name is a prefix of another cluster's collection")
	}
	v6 := Endpoint(c, "[2001:db8::1]:80")
	if got, _ := CollectionOf(v6); got != c {
		t.Fatalf("CollectionOf(%q) = %q", v6, got)
	}
}

func TestCheckCollection(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/x/*", ""},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/x/y/*", ""},
		{"http://a/envoy.config.endpoint.v3.LbEndpoint/x/*", "want xdstp://"},
		{"xdstp:///envoy.config.endpoint.v3.LbEndpoint/x/*", "no authority"},
		{"xdstp://a", "no authority"},
		{"xdstp://a/envoy.config.endpoint.v3.ClusterLoadAssignment/x/*", "resource type is not"},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint//*", "want an id"},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/x/", "want an id"},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/x", "want an id"},
	} {
		err := CheckCollection(tc.name)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckCollection(%q) = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, n := range []string{"noslash", "xdstp://a/T/x/"} {
		if c, ok := CollectionOf(n); ok {
			t.Errorf("CollectionOf(%q) = %q, true; want false", n, c)
		}
	}
}
