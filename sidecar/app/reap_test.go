package app

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/tools/testkit"
)

type cfgPtr struct {
	p atomic.Pointer[dataplane.Config]
}

func (c *cfgPtr) Load() *dataplane.Config { return c.p.Load() }

// TestReapPoolFollowsConfig: the periodic reaper closes idle upstream connections
// to an endpoint once the active config no longer has it, and keeps those to
// endpoints it still has.
func TestReapPoolFollowsConfig(t *testing.T) {
	stay := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	leave := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	compile := func(eps ...netip.AddrPort) *dataplane.Config {
		t.Helper()
		cfg, err := dt.Simple("outbound", dt.MustAddr("127.0.0.1:1"), false, eps...).Compile(dataplane.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := liveEndpoints(nil); len(got) != 0 {
		t.Errorf("live set without a config: %v", got)
	}
	var cfg cfgPtr
	cfg.p.Store(compile(stay, leave))
	if got := liveEndpoints(cfg.Load()); len(got) != 2 {
		t.Fatalf("live set %v, want both endpoints", got)
	}
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Hour, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second,
		Limits: circuitbreak.Limits{MaxConnections: 8, MaxPendingRequests: 1, MaxRequests: 8, MaxRetries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ap := range []netip.AddrPort{stay, leave} {
		e := cluster.NewEndpoint(ap, 1, true)
		conn, _, err := pool.Get(context.Background(), c, e)
		if err != nil {
			t.Fatal(err)
		}
		pool.Put(conn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { reapPool(ctx, pool, &cfg, 10*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	cfg.p.Store(compile(stay))
	testkit.Eventually(t, 5*time.Second, "idle connection to the departed endpoint closed", func() bool {
		return pool.Idle(leave.String()) == 0
	})
	if n := pool.Idle(stay.String()); n != 1 {
		t.Errorf("idle connections to the endpoint still configured: %d, want 1", n)
	}
}
