package gen

import (
	"path/filepath"
	"testing"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// TestSidecarAccepts runs every golden sidecar snapshot through exactly what a
// Weft sidecar runs before activating a config (its xDS decoders and dataplane
// compile), so gen never emits what our own sidecar would NACK.
func TestSidecarAccepts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.input.yaml")
	for _, f := range files {
		m, ps := meshFromFile(t, f)
		for _, p := range ps {
			if !p.Registers() {
				continue
			}
			snap := mustProxy(t, m, p)
			state := map[string]map[string]any{}
			for _, typ := range []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType} {
				byName := map[string]any{}
				for name, r := range snap.Resources[typ] {
					got, v, err := xdsresource.Decode(typ, r.Any)
					if err != nil {
						t.Errorf("%s %s: %s %q: %v", f, p.ID, typ, name, err)
						continue
					}
					byName[got] = v
				}
				state[typ] = byName
			}
			if _, err := dataplane.Compile(state); err != nil {
				t.Errorf("%s %s: compile: %v", f, p.ID, err)
			}
		}
	}
}
