package gen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current output")

// testProxyKind marks documents in a golden input that describe a connected
// proxy rather than a resource. The harness splits them off before handing the
// rest to resource.Decode.
const testProxyKind = "TestProxy"

// testStoreKind marks a document saying when the store wrote the input's
// revision ({kind: TestStore, writtenAt: RFC 3339}), as a watch event would
// tell pilot; without one the write time is unknown.
const testStoreKind = "TestStore"

// testProxy is a proxy connected to pilot. Every proxy's snapshot is rendered;
// those with namespace and address also register their workload (node.Registers).
type testProxy struct {
	Kind           string            `json:"kind"`
	ID             string            `json:"id"`
	Namespace      string            `json:"namespace,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Address        string            `json:"address,omitempty"`
	InboundPort    uint32            `json:"inboundPort,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Locality       string            `json:"locality,omitempty"`
	// Identity is the SPIFFE ID pilot verified from the proxy's certificate.
	Identity string `json:"identity,omitempty"`
	// Interception is node.Interception: "", iptables or ebpf.
	Interception string `json:"interception,omitempty"`
	// LEDS is node.LEDS: the proxy advertises node.FeatureLEDS.
	LEDS bool `json:"leds,omitempty"`
}

// loadInput decodes a golden input into the compile input and the proxies to
// render.
func loadInput(t testing.TB, path string) (compile.Input, []*node.Node) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var resources []string
	var proxies []*node.Node
	var writeTimes map[int64]time.Time
	for i, doc := range strings.Split(string(data), "\n---\n") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
		if head.Kind == testStoreKind {
			var st struct {
				Kind      string    `json:"kind"`
				WrittenAt time.Time `json:"writtenAt"`
			}
			if err := yaml.UnmarshalStrict([]byte(doc), &st); err != nil {
				t.Fatalf("%s: document %d: %v", path, i+1, err)
			}
			writeTimes = map[int64]time.Time{1: st.WrittenAt}
			continue
		}
		if head.Kind != testProxyKind {
			resources = append(resources, doc)
			continue
		}
		var p testProxy
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
		loc, err := node.ParseLocality(p.Locality)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
		proxies = append(proxies, &node.Node{ID: p.ID, Namespace: p.Namespace, ServiceAccount: p.ServiceAccount,
			Address: p.Address, InboundPort: p.InboundPort, Labels: p.Labels, Locality: loc, Identity: p.Identity, Interception: p.Interception, LEDS: p.LEDS})
	}
	objs, err := resource.Decode([]byte(strings.Join(resources, "\n---\n")), path)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	for _, o := range objs {
		o.Metadata.Revision = 1 // as the store would: every object written at the input's revision
	}
	return compile.Input{Revision: 1, Objects: objs, Proxies: proxies, WriteTimes: writeTimes}, proxies
}

// renderSnapshot renders a snapshot as plain data: per type, the set version
// and each resource as protojson (re-decoded so map keys sort and protojson's
// deliberately unstable whitespace disappears).
func renderSnapshot(t testing.TB, s *snapshot.Snapshot) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, typ := range snapshot.PushOrder {
		if len(s.Resources[typ]) == 0 {
			continue
		}
		short := typ[strings.LastIndex(typ, ".")+1:]
		byName := map[string]any{}
		for _, name := range s.Names(typ) {
			r := s.Resources[typ][name]
			m, err := r.Any.UnmarshalNew()
			if err != nil {
				t.Fatalf("%s %s: %v", short, name, err)
			}
			b, err := protojson.Marshal(m)
			if err != nil {
				t.Fatalf("%s %s: %v", short, name, err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			byName[name] = v
		}
		out[short] = map[string]any{"version": s.Version(typ), "resources": byName}
	}
	return out
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		t.Run(name, func(t *testing.T) {
			compareGolden(t, filepath.Join("testdata", name+".golden.yaml"), func() map[string]any {
				cin, proxies := loadInput(t, in)
				mesh, err := compile.Compile(cin)
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				doc := map[string]any{"warnings": mesh.Warnings}
				snaps := map[string]any{}
				for _, p := range proxies {
					s, err := Proxy(mesh, p)
					if err != nil {
						t.Fatalf("Proxy(%s): %v", p.ID, err)
					}
					if err := Consistent(s); err != nil {
						t.Errorf("snapshot of %s is not consistent:\n%v", p.ID, err)
					}
					validateAll(t, s)
					snaps[p.ID] = renderSnapshot(t, s)
				}
				doc["proxies"] = snaps
				return doc
			})
		})
	}
}

// compareGolden checks build's document against the golden file (or rewrites
// it with -update).
func compareGolden(t *testing.T, golden string, build func() map[string]any) {
	t.Helper()
	got, err := yaml.Marshal(build())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (-want +got; run go test ./pilot/xds/gen -update if intended):\n%s", golden, cmp.Diff(string(want), string(got)))
	}
}

// meshFromFile compiles a golden input for other tests.
func meshFromFile(t testing.TB, path string) (*ir.Mesh, []*node.Node) {
	t.Helper()
	in, proxies := loadInput(t, path)
	m, err := compile.Compile(in)
	if err != nil {
		t.Fatalf("compile %s: %v", path, err)
	}
	return m, proxies
}
