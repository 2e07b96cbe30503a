package publish

import (
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// checkCache remembers checkSidecar's verdict by snapshot content, so sidecars
// whose scopes differ (each registers its own address) but whose generated
// content is equal (replicas of one workload) are checked once per compiled mesh.
type checkCache struct {
	max int
	run func(*snapshot.Snapshot) error // checkSidecar

	mu sync.Mutex // guards m
	m  map[string]*checkEntry
}

type checkEntry struct {
	once sync.Once
	err  error
}

// maxCheckEntries bounds the verdicts kept; the cache restarts empty when full
// (one compiled mesh needs one entry per distinct content).
const maxCheckEntries = 4096

func (c *checkCache) check(snap *snapshot.Snapshot) error {
	key := contentKey(snap)
	c.mu.Lock()
	e, ok := c.m[key]
	if !ok {
		if c.m == nil || len(c.m) >= c.max {
			c.m = map[string]*checkEntry{}
		}
		e = &checkEntry{}
		c.m[key] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.err = c.run(snap) })
	return e.err
}

// contentKey identifies what checkSidecar reads: the per-type versions (hashes of
// every name and content hash) of the types it decodes.
func contentKey(snap *snapshot.Snapshot) string {
	var b strings.Builder
	for _, typ := range checkedTypes {
		b.WriteString(snap.Version(typ))
		b.WriteByte(0)
	}
	return b.String()
}

var checkedTypes = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.LbEndpointType, snapshot.ListenerType, snapshot.RouteType, snapshot.SecretType, snapshot.StalenessType}

// checkSidecar runs a snapshot through exactly what a Weft sidecar runs before
// activating it (Secrets through the runtime, which checks ROOTCA's bundle).
func checkSidecar(snap *snapshot.Snapshot) error {
	state := map[string]map[string]any{}
	for _, typ := range checkedTypes {
		byName := map[string]any{}
		decode := xdsresource.Decode
		if typ == snapshot.SecretType {
			decode = func(_ string, a *anypb.Any) (string, any, error) { return runtime.DecodeSecret(a) }
		}
		for name, r := range snap.Resources[typ] {
			got, v, err := decode(typ, r.Any)
			if err != nil {
				return fmt.Errorf("%s %q: %w", status.TypeName(typ), name, err)
			}
			if got == "" {
				got = name // an LbEndpoint is named by its wrapper only
			}
			byName[got] = v
		}
		state[typ] = byName
	}
	if _, err := dataplane.Compile(state); err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	return nil
}

// checkRootCA runs a ROOTCA resource through the sidecar's Secret decoding.
func checkRootCA(r snapshot.Resource) error {
	if _, _, err := runtime.DecodeSecret(r.Any); err != nil {
		return fmt.Errorf("SDS %q: %w", r.Name, err)
	}
	return nil
}
