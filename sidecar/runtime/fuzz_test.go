package runtime

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
)

// FuzzDecodeManifest feeds arbitrary bytes as a manifest resource from the wire:
// Decode must refuse with a named check, or return a verified manifest.
func FuzzDecodeManifest(f *testing.F) {
	e := newEnv(f)
	f.Add(e.sign(mesh("127.0.0.1:9001"), signOpts{}).GetValue())
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := New(Config{NodeID: nodeID, PublisherKey: e.pub, StateDir: "unused", Logger: hclog.NewNullLogger(), Now: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		name, v, err := r.Decode(manifest.TypeURL, &anypb.Any{TypeUrl: manifest.TypeURL, Value: b})
		if name != manifest.Name {
			t.Fatalf("name %q", name)
		}
		if err != nil {
			if v != nil || Check(err) == "read" {
				t.Fatalf("refusal %v with value %v / unnamed check", err, v)
			}
			return
		}
		m, ok := v.(*Manifest)
		if !ok || m.Verified == nil || m.Verified.NodeID != nodeID {
			t.Fatalf("accepted %#v", v)
		}
	})
}

// FuzzParseOverrides: operator overrides either parse into valid policies of the
// named classes only, or fail with a "staleness" error.
func FuzzParseOverrides(f *testing.F) {
	for _, s := range []string{"routes=1s/3s", "routes=0/3s/failClosed\nendpoints=1m/0/serveStale", "routes", "x=1s/2s/drop", "routes=1h/-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		set, err := ParseOverrides(strings.Split(in, "\n"))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "staleness") {
				t.Fatalf("error %q does not say staleness", err)
			}
			return
		}
		for c, p := range set {
			if p.Class != c || p.Check() != nil || !strings.Contains(in, string(c)+"=") {
				t.Fatalf("policy %+v for %s not from the input: %v", p, c, p.Check())
			}
		}
	})
}
