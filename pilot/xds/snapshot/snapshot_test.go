package snapshot

import (
	"testing"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/certs/manifest"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConstructorsAgree: New, FromResources and FromSets give the same resources
// and versions for the same content, so gen's shared-set path never changes what
// a proxy is told.
func TestConstructorsAgree(t *testing.T) {
	msgs := map[string]map[string]proto.Message{
		ClusterType:  {"a": wrapperspb.String("a"), "b": wrapperspb.String("b")},
		EndpointType: {"a": wrapperspb.String("cla-a")},
	}
	viaNew, err := New(3, msgs)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]map[string]Resource{}
	sets := map[string]Set{}
	for typ, byName := range msgs {
		res[typ] = map[string]Resource{}
		for name, m := range byName {
			r, err := NewResource(typ, name, m)
			if err != nil {
				t.Fatal(err)
			}
			res[typ][name] = r
		}
		sets[typ] = NewSet(res[typ])
	}
	for name, s := range map[string]*Snapshot{"FromResources": FromResources(3, res), "FromSets": FromSets(3, sets)} {
		if s.Revision != 3 {
			t.Errorf("%s: revision %d", name, s.Revision)
		}
		for _, typ := range PushOrder {
			if got, want := s.Version(typ), viaNew.Version(typ); got != want {
				t.Errorf("%s: %s version %q, want %q", name, typ, got, want)
			}
			for n, r := range viaNew.Resources[typ] {
				if got := s.Resources[typ][n]; got.Version != r.Version || got.Name != n || !proto.Equal(got.Any, r.Any) {
					t.Errorf("%s: %s %s differs", name, typ, n)
				}
			}
		}
	}
	if viaNew.Version(ListenerType) != "" {
		t.Errorf("empty type must have version \"\"")
	}
	if viaNew.Version(ClusterType) == viaNew.Version(EndpointType) || viaNew.Version(ClusterType) == "" {
		t.Errorf("versions not content hashes: %q %q", viaNew.Version(ClusterType), viaNew.Version(EndpointType))
	}
}

// TestWeftTypes: the Weft types are the shared packages' type URLs, and the
// manifest is pushed last with the staleness policy, which it covers, before it.
func TestWeftTypes(t *testing.T) {
	if StalenessType != stalenesspb.TypeURL || ManifestType != manifest.TypeURL {
		t.Fatalf("type URLs %q %q, want %q %q", StalenessType, ManifestType, stalenesspb.TypeURL, manifest.TypeURL)
	}
	n := len(PushOrder)
	if got := PushOrder[n-2:]; got[0] != StalenessType || got[1] != ManifestType {
		t.Fatalf("PushOrder ends %q, want [staleness manifest]", got)
	}
}
