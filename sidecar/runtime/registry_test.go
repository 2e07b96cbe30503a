package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Activation applies the new configuration to the long-lived per-Service state and
// retires what it no longer references (dataplane.Config.Activate); a refused
// candidate retires nothing.
func TestActivationKeepsAndRetiresSharedState(t *testing.T) {
	e := newEnv(t)
	reg := cluster.NewRegistry()
	r := e.runtime(func(c *Config) {
		c.Compile = func(st map[string]map[string]any) (*dataplane.Config, error) {
			return dataplane.CompileWith(st, dataplane.Options{Registry: reg})
		}
	})
	ctx := context.Background()
	v1 := mesh("127.0.0.1:9001")
	if err := r.Apply(ctx, e.update(r, v1, "v1", e.sign(v1, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	b := r.Load().Cluster("backend").Breaker
	if !b.Acquire(circuitbreak.Requests) {
		t.Fatal("acquire")
	}
	defer b.Release(circuitbreak.Requests)
	// An EDS change: the breaker and its count stay, the departed host is retired.
	v2 := mesh("127.0.0.1:9002")
	if err := r.Apply(ctx, e.update(r, v2, "v2", e.sign(v2, signOpts{revision: 2}))); err != nil {
		t.Fatal(err)
	}
	c := r.Load().Cluster("backend")
	if c.Breaker != b || b.InUse(circuitbreak.Requests) != 1 {
		t.Fatalf("breaker replaced (%v) or count lost (%d)", c.Breaker != b, b.InUse(circuitbreak.Requests))
	}
	if hs := c.Shared.Hosts(); len(hs) != 1 || hs[0].Address() != "127.0.0.1:9002" {
		t.Fatalf("hosts after the EDS change: %v", hs)
	}
	// A refused candidate (a route to a missing cluster) retires nothing.
	bad := dt.Resources{}
	for typ, ms := range v2 {
		if typ != xdsresource.RouteType {
			bad[typ] = ms
		}
	}
	bad.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "nowhere", 0))))
	bad[xdsresource.ClusterType] = nil
	if err := r.Apply(ctx, e.update(r, bad, "v3", e.sign(bad, signOpts{revision: 3}))); !errors.Is(err, dataplane.ErrInvalid) {
		t.Fatalf("bad candidate: %v, want a compile refusal", err)
	}
	if reg.Len() != 1 || reg.Shared("backend") != c.Shared {
		t.Fatalf("a refused candidate retired the active config's state (%d entries)", reg.Len())
	}
}
