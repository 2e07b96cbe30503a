package gen

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// sidecarAccepts runs a snapshot through exactly what a Weft sidecar runs before
// activating a config: its xDS decoders, then dataplane compile.
func sidecarAccepts(s *snapshot.Snapshot) error {
	state := map[string]map[string]any{}
	for _, typ := range []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType, snapshot.StalenessType} {
		byName := map[string]any{}
		for name, r := range s.Resources[typ] {
			got, v, err := xdsresource.Decode(typ, r.Any)
			if err != nil {
				return fmt.Errorf("%s %q: %w", typ, name, err)
			}
			byName[got] = v
		}
		state[typ] = byName
	}
	if _, err := dataplane.Compile(state); err != nil {
		return fmt.Errorf("dataplane compile: %w", err)
	}
	return nil
}

// TestSidecarAccepts: every golden sidecar snapshot is one our own sidecar
// accepts, so gen never emits what a Weft sidecar would NACK.
func TestSidecarAccepts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.input.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		m, ps := meshFromFile(t, f)
		for _, p := range ps {
			if !p.Registers() {
				continue
			}
			if err := sidecarAccepts(mustProxy(t, m, p)); err != nil {
				t.Errorf("%s %s: %v", f, p.ID, err)
			}
		}
	}
}
