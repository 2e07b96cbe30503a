package cluster_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/tools/testkit"
)

func newPool(t *testing.T) *cluster.Pool {
	t.Helper()
	p, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute, BufferSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type getResult struct {
	conn *cluster.Conn
	err  error
	took time.Duration
}

func getAsync(p *cluster.Pool, c *cluster.Cluster, e *cluster.Endpoint) <-chan getResult {
	ch := make(chan getResult, 1)
	getInto(context.Background(), ch, p, c, e)
	return ch
}

// getInto runs a Get with ctx and sends its result on ch (buffered enough).
func getInto(ctx context.Context, ch chan<- getResult, p *cluster.Pool, c *cluster.Cluster, e *cluster.Endpoint) {
	go func() {
		start := time.Now()
		conn, _, err := p.Get(ctx, c, e)
		ch <- getResult{conn, err, time.Since(start)}
	}()
}

// maxPendingRequests is a bounded queue: at the bound every request waits, one
// past it is refused at once naming maxPendingRequests; a released connection goes
// to one waiter while the others go on waiting. The queue timeout is long here, so
// the waiters are still queued when the connection is released however slow the
// machine (TestPoolQueueTimeout watches the timeout itself).
func TestPoolPendingQueue(t *testing.T) {
	const pending, queueTimeout = 3, time.Minute
	up := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p := newPool(t)
	e := cluster.NewEndpoint(up, 1, true)
	c := mustNew(t, cluster.Spec{Name: "c", ConnectTimeout: time.Second, QueueTimeout: queueTimeout,
		Limits: circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: pending, MaxRequests: 100}, Endpoints: []*cluster.Endpoint{e}})
	held, _, err := p.Get(context.Background(), c, e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan getResult, pending)
	for range pending {
		getInto(ctx, results, p, c, e)
	}
	testkit.Eventually(t, 5*time.Second, "the queue full at its bound", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == pending })
	_, _, err = p.Get(context.Background(), c, e)
	if l, ok := cluster.Overflowed(err); !ok || l != circuitbreak.MaxPendingRequests || !errors.Is(err, cluster.ErrOverflow) ||
		err.Error() != `cluster "c": upstream overflow: maxPendingRequests` {
		t.Fatalf("one past the bound: %v", err)
	}
	// One waiter gets the released connection (and keeps it: closing it would
	// wake the next); the others still wait.
	p.Put(held)
	r := <-results
	if r.err != nil {
		t.Fatalf("the released connection went to no waiter: %v", r.err)
	}
	defer r.conn.Close()
	if n := c.Breaker.InUse(circuitbreak.Pending); n != pending-1 {
		t.Errorf("pending after one waiter was served: %d, want %d", n, pending-1)
	}
	cancel()
	for range pending - 1 {
		if r := <-results; !errors.Is(r.err, context.Canceled) {
			t.Errorf("a waiter after the release: %v, want it waiting until cancelled", r.err)
		}
	}
	if n := c.Breaker.Overflows(circuitbreak.MaxPendingRequests); n != 1 {
		t.Errorf("maxPendingRequests overflows %d, want 1", n)
	}
	if n := c.Breaker.Overflows(circuitbreak.MaxConnections); n != 0 {
		t.Errorf("maxConnections overflows %d, want 0 (a cancelled wait is no overflow)", n)
	}
	if n := c.Breaker.InUse(circuitbreak.Pending); n != 0 {
		t.Errorf("pending in use at the end %d", n)
	}
}

// A waiter waits its queue timeout and no less, then overflows naming
// maxConnections, counted once per request (not per wait).
func TestPoolQueueTimeout(t *testing.T) {
	const waiters, queueTimeout = 2, 150 * time.Millisecond
	up := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p := newPool(t)
	e := cluster.NewEndpoint(up, 1, true)
	c := mustNew(t, cluster.Spec{Name: "c", ConnectTimeout: time.Second, QueueTimeout: queueTimeout,
		Limits: circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: waiters, MaxRequests: 100}, Endpoints: []*cluster.Endpoint{e}})
	held, _, err := p.Get(context.Background(), c, e)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	results := make(chan getResult, waiters)
	for range waiters {
		getInto(context.Background(), results, p, c, e)
	}
	for range waiters {
		r := <-results
		if l, ok := cluster.Overflowed(r.err); !ok || l != circuitbreak.MaxConnections {
			t.Errorf("waiter: %v, want a maxConnections overflow", r.err)
		} else if r.took < queueTimeout {
			t.Errorf("overflowed after %v, before the queue timeout %v", r.took, queueTimeout)
		}
	}
	if n := c.Breaker.Overflows(circuitbreak.MaxConnections); n != waiters {
		t.Errorf("maxConnections overflows %d, want %d (each queue timeout once, not each wait)", n, waiters)
	}
	if n := c.Breaker.InUse(circuitbreak.Pending); n != 0 {
		t.Errorf("pending in use at the end %d", n)
	}
}

// A slot freed by closing a connection to one address goes to a request pending
// for another address of the same Service; an idle connection to another address
// is closed to make room rather than leave a request waiting.
func TestPoolSlotAcrossAddresses(t *testing.T) {
	a := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	b := dt.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	p := newPool(t)
	ea, eb := cluster.NewEndpoint(a, 1, true), cluster.NewEndpoint(b, 1, true)
	c := mustNew(t, cluster.Spec{Name: "c", ConnectTimeout: time.Second, QueueTimeout: 10 * time.Second,
		Limits: circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 100}, Endpoints: []*cluster.Endpoint{ea, eb}})
	ca, _, err := p.Get(context.Background(), c, ea)
	if err != nil {
		t.Fatal(err)
	}
	w := getAsync(p, c, eb)
	testkit.Eventually(t, 5*time.Second, "b pending", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	ca.Close()
	r := <-w
	if r.err != nil {
		t.Fatalf("pending request for b after a's connection closed: %v", r.err)
	}
	if r.took >= 5*time.Second {
		t.Errorf("took %v: woken by its timeout, not the freed slot", r.took)
	}
	// b's connection goes idle; a request for a takes its slot at once.
	p.Put(r.conn)
	start := time.Now()
	ca2, _, err := p.Get(context.Background(), c, ea)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("took %v, want the idle connection to b evicted at once", took)
	}
	if n := p.Idle(b.String()); n != 0 {
		t.Errorf("idle to b %d, want 0 (evicted)", n)
	}
	if n := c.Breaker.InUse(circuitbreak.Connections); n != 1 {
		t.Errorf("connections in use %d, want 1", n)
	}
	// A connection to a released while b waits is closed, not pooled: its slot
	// goes to b.
	w = getAsync(p, c, eb)
	testkit.Eventually(t, 5*time.Second, "b pending again", func() bool { return c.Breaker.InUse(circuitbreak.Pending) == 1 })
	p.Put(ca2)
	if r := <-w; r.err != nil || r.took >= 5*time.Second {
		t.Fatalf("pending request for b after a's connection was released: %v after %v", r.err, r.took)
	} else {
		r.conn.Close()
	}
	if n := p.Idle(a.String()); n != 0 {
		t.Errorf("idle to a %d, want 0 (closed for b)", n)
	}
}

func TestQueueTimeoutBounds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want time.Duration // 0: refused
	}{
		{0, cluster.DefaultQueueTimeout},
		{time.Nanosecond, time.Nanosecond},
		{cluster.MaxQueueTimeout, cluster.MaxQueueTimeout},
		{cluster.MaxQueueTimeout + time.Nanosecond, 0},
		{-time.Nanosecond, 0},
	} {
		c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second, QueueTimeout: tc.d, Limits: limits})
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("queue timeout %v accepted", tc.d)
		case tc.want != 0 && err != nil:
			t.Errorf("queue timeout %v: %v", tc.d, err)
		case tc.want != 0 && c.QueueTimeout != tc.want:
			t.Errorf("queue timeout %v became %v, want %v", tc.d, c.QueueTimeout, tc.want)
		}
	}
}
