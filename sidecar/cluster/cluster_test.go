package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func eps(weights ...uint32) []*cluster.Endpoint {
	out := make([]*cluster.Endpoint, len(weights))
	for i, w := range weights {
		out[i] = cluster.NewEndpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80), w, true)
	}
	return out
}

var limits = circuitbreak.Limits{MaxConnections: 2, MaxPendingRequests: 1, MaxRequests: 10, MaxRetries: 1}

func build(t *testing.T, p cluster.Policy, e []*cluster.Endpoint, seed uint64) *cluster.Cluster {
	t.Helper()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	c, err := cluster.New(cluster.Spec{Name: "c", Policy: p, RingMin: 1024, RingMax: 8192, ConnectTimeout: time.Second, Limits: limits, Endpoints: e,
		Rand: func() uint64 { mu.Lock(); defer mu.Unlock(); return rng.Uint64() }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func shares(t *testing.T, c *cluster.Cluster, n int, hash func(int) uint64) map[string]float64 {
	t.Helper()
	counts := map[string]int{}
	for i := range n {
		e, err := c.Pick(hash(i))
		if err != nil {
			t.Fatal(err)
		}
		counts[e.Address()]++
	}
	out := map[string]float64{}
	for k, v := range counts {
		out[k] = float64(v) / float64(n)
	}
	return out
}

func TestPickerWeights(t *testing.T) {
	tests := []struct {
		policy cluster.Policy
		tol    float64
	}{
		{cluster.RoundRobin, 0.001}, // exact over whole schedules
		{cluster.Random, 0.01},
		{cluster.RingHash, 0.03}, // ring points approximate weights
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			c := build(t, tc.policy, eps(1, 2, 5), 7)
			rng := rand.New(rand.NewPCG(3, 4))
			got := shares(t, c, 80000, func(int) uint64 { return rng.Uint64() })
			for i, w := range []float64{1.0 / 8, 2.0 / 8, 5.0 / 8} {
				a := fmt.Sprintf("10.0.0.%d:80", i+1)
				if math.Abs(got[a]-w) > tc.tol {
					t.Errorf("%s share %.4f, want %.4f±%.3f", a, got[a], w, tc.tol)
				}
			}
		})
	}
}

func TestRoundRobinInterleaves(t *testing.T) {
	c := build(t, cluster.RoundRobin, eps(1, 1, 1), 1)
	var seq []string
	for range 6 {
		e, _ := c.Pick(0)
		seq = append(seq, e.Address())
	}
	for i := 3; i < 6; i++ {
		if seq[i] != seq[i-3] || seq[i] == seq[i-1] {
			t.Fatalf("not a rotation: %v", seq)
		}
	}
}

func TestLeastRequestPrefersIdle(t *testing.T) {
	e := eps(1, 1, 1, 1)
	c := build(t, cluster.LeastRequest, e, 9) // gives the endpoints their hosts, which count
	for _, x := range e[:3] {
		for range 5 {
			x.Begin()
		}
	}
	n := 0
	for range 1000 {
		p, _ := c.Pick(0)
		if p == e[3] {
			n++
		}
	}
	// P2C picks the idle host whenever it is one of the two samples: 1-(3/4)^2 = 7/16.
	if math.Abs(float64(n)/1000-7.0/16) > 0.06 {
		t.Errorf("idle host picked %d/1000, want about 437", n)
	}
}

// TestRingHashConsistency: removing one of five endpoints remaps only the keys it
// owned; every other key stays where it was.
func TestRingHashConsistency(t *testing.T) {
	all := eps(1, 1, 1, 1, 1)
	c1 := build(t, cluster.RingHash, all, 1)
	c2 := build(t, cluster.RingHash, all[:4], 1)
	moved, owned := 0, 0
	for i := range 10000 {
		h := cluster.Hash(fmt.Appendf(nil, "user-%d", i))
		a, _ := c1.Pick(h)
		b, _ := c2.Pick(h)
		if a == all[4] {
			owned++
			continue
		}
		if a != b {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys not owned by the removed host moved", moved)
	}
	if owned < 1000 || owned > 3000 {
		t.Errorf("removed host owned %d/10000 keys, want about 2000", owned)
	}
	// Same key, same host, every time.
	h := cluster.Hash([]byte("jason"))
	first, _ := c1.Pick(h)
	for range 100 {
		if e, _ := c1.Pick(h); e != first {
			t.Fatal("ring hash not stable")
		}
	}
}

func TestPanicModeAndEmpty(t *testing.T) {
	e := eps(1, 1)
	e[0].Healthy, e[1].Healthy = false, false
	c := build(t, cluster.RoundRobin, e, 1)
	if _, err := c.Pick(0); err != nil {
		t.Errorf("all unhealthy should still pick (panic mode): %v", err)
	}
	c = build(t, cluster.Random, nil, 1)
	if _, err := c.Pick(0); !errors.Is(err, cluster.ErrNoEndpoint) || err.Error() != `cluster "c": no healthy upstream` {
		t.Errorf("empty cluster: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, s := range []cluster.Spec{
		{Name: "", ConnectTimeout: time.Second, Limits: limits},
		{Name: "c", Limits: limits},
		{Name: "c", ConnectTimeout: time.Second},
	} {
		if _, err := cluster.New(s); err == nil {
			t.Errorf("cluster.New(%+v): want error", s)
		}
	}
}

// TestPoolLimits: max connections caps dials, a pending request gets the next released
// connection, and beyond max pending the pool overflows at once.
func TestPoolLimits(t *testing.T) {
	// Accepted connections stay open and silent until the test ends.
	ap := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e := cluster.NewEndpoint(ap, 1, true)
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: 2 * time.Second, Limits: limits, Endpoints: []*cluster.Endpoint{e}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1, reused, err := p.Get(ctx, c, e)
	if err != nil || reused {
		t.Fatalf("first Get: %v reused=%v", err, reused)
	}
	c2, _, err := p.Get(ctx, c, e)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Breaker.InUse(circuitbreak.Connections); got != 2 {
		t.Fatalf("connections in use %d, want 2", got)
	}
	// Third request waits as pending; a fourth overflows max pending (1) at once.
	got := make(chan *cluster.Conn, 1)
	errc := make(chan error, 1)
	go func() {
		cn, _, err := p.Get(ctx, c, e)
		errc <- err
		got <- cn
	}()
	testkit.Eventually(t, 5*time.Second, "third Get pending", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	if _, _, err := p.Get(ctx, c, e); !errors.Is(err, cluster.ErrOverflow) ||
		err.Error() != `cluster "c": upstream overflow: maxPendingRequests` {
		t.Fatalf("fourth Get: %v, want overflow", err)
	}
	p.Put(c1)
	if err := <-errc; err != nil {
		t.Fatalf("pending Get: %v", err)
	}
	c3 := <-got
	if c3 != c1 {
		t.Errorf("pending Get did not receive the released connection")
	}
	p.Put(c3)
	if n := p.Idle(ap.String()); n != 1 {
		t.Errorf("idle = %d, want 1", n)
	}
	c2.Close()
	if got := c.Breaker.InUse(circuitbreak.Connections); got != 1 {
		t.Errorf("connections in use after close %d, want 1 (the idle one)", got)
	}
	// Pending times out after the queue timeout when nothing is released.
	c.QueueTimeout = 50 * time.Millisecond
	a, _, _ := p.Get(ctx, c, e) // the idle one
	b, _, err := p.Get(ctx, c, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Get(ctx, c, e); !errors.Is(err, cluster.ErrOverflow) {
		t.Errorf("pending past timeout: %v, want overflow", err)
	}
	a.Close()
	b.Close()
}

func TestPoolReap(t *testing.T) {
	ap := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	gone := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	const idle = time.Minute
	p, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: idle, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e, eGone := cluster.NewEndpoint(ap, 1, true), cluster.NewEndpoint(gone, 1, true)
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second, Limits: limits, Endpoints: []*cluster.Endpoint{e, eGone}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(e *cluster.Endpoint) {
		t.Helper()
		a, _, err := p.Get(context.Background(), c, e)
		if err != nil {
			t.Fatal(err)
		}
		p.Put(a)
	}
	// Each connection went idle between before and after: a tick before the idle
	// timeout is judged from before (younger for sure), at it from after.
	before := time.Now()
	put(e)
	put(eGone)
	after := time.Now()
	live := map[string]struct{}{ap.String(): {}, gone.String(): {}}
	// Each line is one tick: Reap(now, live), then what is left idle.
	tests := []struct {
		name      string
		at        time.Duration
		dropGone  bool // gone's endpoint left the config before this tick
		wantIdle  int
		wantGone  int
		wantConns int64
	}{
		{"young, both live", 30 * time.Second, false, 1, 1, 2},
		{"endpoint left the config", 30 * time.Second, true, 1, 0, 1},
		{"one tick before the idle timeout", idle - time.Millisecond, true, 1, 0, 1},
		{"at the idle timeout", idle, true, 0, 0, 0},
	}
	for _, tc := range tests {
		if tc.dropGone {
			delete(live, gone.String())
		}
		now := before.Add(tc.at)
		if tc.at >= idle {
			now = after.Add(tc.at)
		}
		p.Reap(now, live)
		if got := p.Idle(ap.String()); got != tc.wantIdle {
			t.Errorf("%s: idle to live endpoint %d, want %d", tc.name, got, tc.wantIdle)
		}
		if got := p.Idle(gone.String()); got != tc.wantGone {
			t.Errorf("%s: idle to departed endpoint %d, want %d", tc.name, got, tc.wantGone)
		}
		if got := c.Breaker.InUse(circuitbreak.Connections); got != tc.wantConns {
			t.Errorf("%s: connections %d, want %d (closed ones release their breaker slot)", tc.name, got, tc.wantConns)
		}
	}
}

// TestPoolNeverHandsOutNoisyConn: a pooled connection on which the upstream wrote
// anything while it was idle (bytes past its last response, or its close) is closed
// by Get, never returned; one with bytes still buffered is closed by Put.
func TestPoolNeverHandsOutNoisyConn(t *testing.T) {
	wrote := make(chan net.Conn, 4)
	ap := dt.ServeTCP(t, func(c net.Conn) {
		wrote <- c
		_, _ = io.Copy(io.Discard, c)
	})
	p, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e := cluster.NewEndpoint(ap, 1, true)
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second, Limits: limits, Endpoints: []*cluster.Endpoint{e}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		act  func(server net.Conn)
	}{
		{"bytes arrived while idle", func(s net.Conn) { _, _ = s.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")) }},
		{"peer closed while idle", func(s net.Conn) { s.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, reused, err := p.Get(ctx, c, e)
			if err != nil || reused {
				t.Fatalf("Get: %v reused=%v", err, reused)
			}
			server := <-wrote
			p.Put(a)
			tc.act(server)
			// The kernel has the bytes (or the FIN) once a non-blocking peek sees them.
			testkit.Eventually(t, 5*time.Second, "upstream's bytes reach the idle socket", func() bool {
				b := make([]byte, 1)
				rc, _ := a.Conn.(syscall.Conn).SyscallConn()
				seen := false
				_ = rc.Read(func(fd uintptr) bool {
					_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					seen = err != syscall.EAGAIN
					return true
				})
				return seen
			})
			b, reused, err := p.Get(ctx, c, e)
			if err != nil {
				t.Fatal(err)
			}
			if b == a || reused {
				t.Fatalf("Get handed out the connection the upstream wrote on (reused=%v)", reused)
			}
			<-wrote // b's server side
			if got := c.Breaker.InUse(circuitbreak.Connections); got != 1 {
				t.Errorf("connections in use %d, want 1 (the noisy one closed)", got)
			}
			b.Close()
		})
	}
	t.Run("bytes buffered at Put", func(t *testing.T) {
		a, _, err := p.Get(ctx, c, e)
		if err != nil {
			t.Fatal(err)
		}
		server := <-wrote
		_, _ = server.Write([]byte("xx"))
		if _, err := a.R.ReadByte(); err != nil {
			t.Fatal(err)
		}
		p.Put(a) // one byte still buffered
		if n := p.Idle(ap.String()); n != 0 {
			t.Errorf("idle %d after Put with a buffered byte, want 0", n)
		}
		if got := c.Breaker.InUse(circuitbreak.Connections); got != 0 {
			t.Errorf("connections in use %d, want 0", got)
		}
	})
	t.Run("quiet connection is reused", func(t *testing.T) {
		a, _, err := p.Get(ctx, c, e)
		if err != nil {
			t.Fatal(err)
		}
		<-wrote
		p.Put(a)
		b, reused, err := p.Get(ctx, c, e)
		if err != nil || b != a || !reused {
			t.Fatalf("Get: %v, same=%v reused=%v: want the quiet idle connection", err, b == a, reused)
		}
		b.Close()
	})
	t.Run("quiet connection whose last deadline passed is reused", func(t *testing.T) {
		// The proxy does not clear its request's deadline at Put: the next Get's
		// caller sets its own, so the check must not take a passed one for a fault.
		a, _, err := p.Get(ctx, c, e)
		if err != nil {
			t.Fatal(err)
		}
		<-wrote
		_ = a.SetDeadline(time.Unix(1, 0))
		p.Put(a)
		b, reused, err := p.Get(ctx, c, e)
		if err != nil || b != a || !reused {
			t.Fatalf("Get: %v, same=%v reused=%v: want the quiet idle connection", err, b == a, reused)
		}
		b.Close()
	})
}

// BenchmarkPoolGetPut: the reuse check (one non-blocking recv) allocates nothing.
func BenchmarkPoolGetPut(b *testing.B) {
	ap := dt.ServeTCP(b, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	e := cluster.NewEndpoint(ap, 1, true)
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second, Limits: limits, Endpoints: []*cluster.Endpoint{e}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	a, _, err := p.Get(ctx, c, e)
	if err != nil {
		b.Fatal(err)
	}
	p.Put(a)
	b.ReportAllocs()
	for b.Loop() {
		a, _, err := p.Get(ctx, c, e)
		if err != nil {
			b.Fatal(err)
		}
		p.Put(a)
	}
}
