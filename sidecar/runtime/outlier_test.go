package runtime

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// odMesh is mesh with outlier detection on "backend": 3 consecutive 5xx eject for
// 30s, at most half the hosts.
func odMesh(backends ...string) dt.Resources {
	res := mesh(backends...)
	for _, m := range res[xdsresource.ClusterType] {
		m.(*clusterv3.Cluster).OutlierDetection = &clusterv3.OutlierDetection{
			Consecutive_5Xx: wrapperspb.UInt32(3), EnforcingConsecutive_5Xx: wrapperspb.UInt32(100),
			BaseEjectionTime: durationpb.New(30 * time.Second), MaxEjectionPercent: wrapperspb.UInt32(50)}
	}
	return res
}

// withRegistry compiles with a sidecar-lifetime registry, as sidecar/app does.
func withRegistry(reg *cluster.Registry) func(*Config) {
	return func(c *Config) {
		c.Compile = func(st map[string]map[string]any) (*dataplane.Config, error) {
			return dataplane.CompileWith(st, dataplane.Options{Registry: reg})
		}
	}
}

// ejectsWhileStale: with the endpoints class expired and served stale, a failing
// host of the active configuration is ejected on its third 5xx, no pick goes to it,
// and it comes back when its time is served.
func ejectsWhileStale(t *testing.T, r *Runtime, reg *cluster.Registry, now time.Time) {
	t.Helper()
	for _, s := range r.Tick(now, time.Time{}) {
		if s.Class == staleness.Endpoints && (s.Level != staleness.Expired || s.Action != staleness.ServeStale) {
			t.Fatalf("endpoints %s %s, want served stale", s.Level, s.Action)
		}
	}
	if why, bad := r.Degraded(); bad {
		t.Fatalf("routing degraded: %s", why)
	}
	c := r.Load().Cluster("backend")
	bad := c.Endpoints()[0]
	for range 3 {
		c.Observe(bad, 503)
	}
	if !bad.Host.Outlier.Ejected() {
		t.Fatal("not ejected while endpoints are stale")
	}
	for i := range 100 {
		if e, err := c.Pick(uint64(i)); err != nil || e == bad {
			t.Fatalf("pick %d: %v %v", i, e, err)
		}
	}
	ej := reg.Ejections()
	if len(ej) != 1 || ej[0].Host != bad.Address() {
		t.Fatalf("ejections %+v", ej)
	}
	reg.TickOutliers(ej[0].Until, rand.Uint64)
	if bad.Host.Outlier.Ejected() {
		t.Fatal("not returned after its time")
	}
}

// TestEjectionWhileEndpointsStale is issue #8 item 5: outlier ejection keeps
// protecting clients while pilot is away and the endpoints are served stale, on
// the configuration pilot delivered and on the last-known-good one a restart
// without pilot activates. Nothing in it depends on the stream: the detector is
// configured at activation, and the sidecar's outlier goroutine ticks on its own.
func TestEjectionWhileEndpointsStale(t *testing.T) {
	e := newEnv(t)
	stale := func(c *Config) { c.Overrides = overrides(t, "endpoints=1s/2s/serveStale") }
	reg := cluster.NewRegistry()
	r := e.runtime(stale, withRegistry(reg))
	res := odMesh("127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	ejectsWhileStale(t, r, reg, t0.Add(3*time.Second)) // no confirmation since t0

	// A restart with pilot down: the last-known-good, on a new process's registry.
	e.flush()
	e.clock.Set(t0.Add(10 * time.Minute))
	reg = cluster.NewRegistry()
	r = e.runtime(stale, withRegistry(reg))
	if _, err := r.LoadLastKnownGood(); err != nil {
		t.Fatal(err)
	}
	if !r.ActivateLastKnownGood() {
		t.Fatal("last-known-good not activated")
	}
	ejectsWhileStale(t, r, reg, t0.Add(10*time.Minute))
}
