package httpproxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

type result struct {
	code     int
	overflow string
	local    string
	took     time.Duration
	err      error
}

func getAsync(c *http.Client, url string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			ch <- result{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- result{code: resp.StatusCode, overflow: resp.Header.Get(httpproxy.OverflowHeader),
			local: resp.Header.Get(httpproxy.LocalHeader), took: time.Since(start)}
	}()
	return ch
}

// Every circuit-breaker overflow is answered at once with 503, the limit's API name
// in x-weft-overflow and x-weft-local: overflow, over HTTP/1.1 and HTTP/2 clients:
// maxRequests when the requests in flight are at the limit; maxPendingRequests when
// the queue of requests waiting for a connection is full; maxConnections when a
// queued request's queue timeout passes.
//
// Two queue timeouts, swapped in as activations do (the breaker and its counts
// stay): a long one while a queued request must still be pending when the next
// requests arrive, and a short one to watch a queued request leave at its timeout.
// No step may depend on a request arriving within a short queue timeout: under
// -race on a loaded machine 200ms passed between two requests, the pending one left
// the queue, and the request meant to find the queue full was queued instead (seen
// as "overflows of maxPendingRequests: 0, want 1").
func TestBreakerOverflowAnswers(t *testing.T) {
	const longQueue, queueTimeout = time.Minute, 200 * time.Millisecond
	for _, tc := range []struct {
		name   string
		client func(*testing.T) *http.Client
	}{{"h1", client}, {"h2", h2cClient}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
				}
			})
			defer close(release)
			ln := listen(t)
			res := dt.Resources{}
			res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
			res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"*"},
				dt.PrefixRoute("/", "app", 0))))
			res.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{MaxConns: 1, MaxPend: 1, MaxReqs: 2}))
			res.Add(xdsresource.EndpointType, dt.Endpoints("app", a.ap()))
			reg := cluster.NewRegistry()
			s := startSidecar(t, ln, res, sidecarOpts{registry: reg, queueTimeout: longQueue})
			b := s.snap.Load().Cluster("app").Breaker
			base := "http://" + s.Addr.String()
			// Each request on its own client connection, so the sidecar sees them
			// concurrently whatever the client's protocol.
			hold := getAsync(tc.client(t), base+"/hold") // takes the one connection
			testkit.Eventually(t, 5*time.Second, "the first request at the upstream", func() bool { return a.reqs.Load() == 1 })
			queued := getAsync(tc.client(t), base+"/") // waits for it as pending
			testkit.Eventually(t, 5*time.Second, "the second request pending", func() bool { return b.InUse(circuitbreak.Pending) == 1 })

			over := <-getAsync(tc.client(t), base+"/") // two in flight: maxRequests
			if over.err != nil || over.code != 503 || over.overflow != "maxRequests" || over.local != httpproxy.LocalOverflow {
				t.Errorf("third request: %+v, want 503 maxRequests overflow", over)
			}
			// Raised in place, as an activation does: a third request now gets
			// past maxRequests and finds the queue at its bound (one waiting).
			lim := b.Limits()
			lim.MaxRequests = 3
			if err := b.SetLimits(lim); err != nil {
				t.Fatal(err)
			}
			full := <-getAsync(tc.client(t), base+"/")
			if full.err != nil || full.code != 503 || full.overflow != "maxPendingRequests" || full.local != httpproxy.LocalOverflow {
				t.Errorf("one past the queue: %+v, want 503 maxPendingRequests overflow", full)
			}
			if full.took >= longQueue {
				t.Errorf("one past the queue answered after %v: queued, not refused at once", full.took)
			}
			// The held connection, released, goes to the queued request.
			release <- struct{}{}
			if r := <-hold; r.err != nil || r.code != 200 {
				t.Errorf("held request: %+v", r)
			}
			if r := <-queued; r.err != nil || r.code != 200 {
				t.Errorf("queued request after the connection was released: %+v, want 200", r)
			}

			// The short queue timeout (and maxRequests 2 again) activated: a queued
			// request leaves at its timeout, no sooner, with maxConnections.
			cfg, err := res.Compile(dataplane.Options{Registry: reg, QueueTimeout: queueTimeout})
			if err != nil {
				t.Fatal(err)
			}
			s.snap.Store(cfg)
			cfg.Activate()
			if got := cfg.Cluster("app").Breaker; got != b {
				t.Fatal("the activation replaced the Service's breaker")
			}
			hold = getAsync(tc.client(t), base+"/hold")
			testkit.Eventually(t, 5*time.Second, "the second held request at the upstream", func() bool { return a.reqs.Load() == 3 })
			r := <-getAsync(tc.client(t), base+"/")
			if r.err != nil || r.code != 503 || r.overflow != "maxConnections" || r.local != httpproxy.LocalOverflow {
				t.Errorf("queued request: %+v, want 503 maxConnections overflow", r)
			}
			if r.took < queueTimeout {
				t.Errorf("queued request answered after %v, before its queue timeout %v", r.took, queueTimeout)
			}
			release <- struct{}{}
			if r := <-hold; r.err != nil || r.code != 200 {
				t.Errorf("second held request: %+v", r)
			}
			for l, want := range map[circuitbreak.Limit]uint64{circuitbreak.MaxRequests: 1, circuitbreak.MaxConnections: 1, circuitbreak.MaxPendingRequests: 1} {
				if got := b.Overflows(l); got != want {
					t.Errorf("overflows of %s: %d, want %d", l, got, want)
				}
			}
		})
	}
}

// countingDial counts the upstream sockets open at once (from the dial to the
// Close) and the most ever seen.
type countingDial struct {
	open, peak atomic.Int64
}

type countedConn struct {
	net.Conn
	d    *countingDial
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.d.open.Add(-1) })
	return err
}

func (d *countingDial) dial(ctx context.Context, addr string) (net.Conn, error) {
	n := d.open.Add(1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		d.open.Add(-1)
		return nil, err
	}
	return &countedConn{Conn: c, d: d}, nil
}

// Through the real proxy, with 1,000 configuration swaps (endpoints of the Service
// moving between two upstreams, as EDS pushes do) under concurrent load, the
// Service's maxConnections (sockets open to its upstreams) and maxRequests (requests
// at its upstreams at once) are never exceeded, and every count returns to zero.
func TestBreakerLimitsHoldAcrossSwapsE2E(t *testing.T) {
	const maxConns, maxReqs = 2, 3
	var atApp, peakApp atomic.Int64
	h := func(w http.ResponseWriter, r *http.Request) {
		n := atApp.Add(1)
		for p := peakApp.Load(); n > p && !peakApp.CompareAndSwap(p, n); p = peakApp.Load() {
		}
		time.Sleep(200 * time.Microsecond) // long enough for requests to overlap
		atApp.Add(-1)
	}
	a, b := startApp(t, h), startApp(t, h)
	ln := listen(t)
	resources := func(eps ...netip.AddrPort) dt.Resources {
		res := dt.Resources{}
		res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
		res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"*"}, dt.PrefixRoute("/", "app", 0))))
		res.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{MaxConns: maxConns, MaxPend: 64, MaxReqs: maxReqs}))
		res.Add(xdsresource.EndpointType, dt.Endpoints("app", eps...))
		return res
	}
	sets := [][]netip.AddrPort{{a.ap()}, {a.ap(), b.ap()}, {b.ap()}}
	var d countingDial
	pool, err := cluster.NewPool(cluster.PoolConfig{MaxIdlePerHost: 16, IdleTimeout: time.Minute, BufferSize: 8192, Dial: d.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := startSidecar(t, ln, resources(sets[0]...), sidecarOpts{proxy: func(c *httpproxy.Config) { c.Pool = pool }})
	reg := cluster.NewRegistry()
	swap := func(i int) {
		cfg, err := resources(sets[i%len(sets)]...).Compile(dataplane.Options{Registry: reg, QueueTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.snap.Store(cfg)
		cfg.Activate()
	}
	swap(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var codes [600]atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(t)
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get("http://" + s.Addr.String() + "/")
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				codes[resp.StatusCode].Add(1)
				// maxRequests refuses at once; nothing else may fail (a request
				// queued for a connection gets one well within its queue timeout).
				if resp.StatusCode != 200 && resp.Header.Get(httpproxy.OverflowHeader) != "maxRequests" {
					t.Errorf("%d %s=%q %q", resp.StatusCode, httpproxy.OverflowHeader, resp.Header.Get(httpproxy.OverflowHeader), body)
				}
			}
		}()
	}
	for i := 1; i <= 1000; i++ {
		swap(i)
		if i%100 == 0 { // let requests through between bursts of swaps
			testkit.Eventually(t, 5*time.Second, "requests answered", func() bool { return codes[200].Load() >= int64(i/10) })
		}
	}
	close(stop)
	wg.Wait()
	br := s.snap.Load().Cluster("app").Breaker
	if p := d.peak.Load(); p > maxConns {
		t.Errorf("%d upstream sockets open at once, maxConnections %d", p, maxConns)
	}
	if p := peakApp.Load(); p > maxReqs {
		t.Errorf("%d requests at the upstreams at once, maxRequests %d", p, maxReqs)
	}
	if codes[200].Load() == 0 {
		t.Fatal("no request succeeded")
	}
	for _, r := range []circuitbreak.Resource{circuitbreak.Pending, circuitbreak.Requests} {
		testkit.Eventually(t, 5*time.Second, r.String()+" back to zero", func() bool { return br.InUse(r) == 0 })
	}
	if n := br.InUse(circuitbreak.Connections); n > maxConns || n != d.open.Load() {
		t.Errorf("connections counted %d, sockets open %d (limit %d)", n, d.open.Load(), maxConns)
	}
	t.Logf("answers: 200 %d, 503 %d; overflows maxRequests %d", codes[200].Load(), codes[503].Load(), br.Overflows(circuitbreak.MaxRequests))
}

// An overflow answer keeps the client's HTTP/1.1 connection when nothing of the
// request is left unread (Envoy keeps it too): the next request on the same
// connection, bodyless or with a body, is served once there is room.
func TestBreakerOverflowKeepsConnection(t *testing.T) {
	release := make(chan struct{})
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		_, _ = io.Copy(io.Discard, r.Body)
	})
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	defer unhold() // a failed check must not leave the upstream's handler held
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"*"},
		dt.PrefixRoute("/", "app", 0))))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{MaxConns: 1, MaxPend: 1, MaxReqs: 1}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("app", a.ap()))
	s := startSidecar(t, ln, res, sidecarOpts{registry: cluster.NewRegistry()})
	hold := getAsync(client(t), "http://"+s.Addr.String()+"/hold")
	testkit.Eventually(t, 5*time.Second, "the held request at the upstream", func() bool { return a.reqs.Load() == 1 })

	conn, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	send := func(req string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer to %q: %v", req, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, req := range []string{
		"GET /a HTTP/1.1\r\nHost: svc\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: svc\r\nContent-Length: 5\r\n\r\nhello",
	} {
		resp := send(req)
		if resp.StatusCode != 503 || resp.Header.Get(httpproxy.OverflowHeader) != "maxRequests" || resp.Close {
			t.Fatalf("%q at maxRequests: %d overflow=%q close=%v, want 503 maxRequests on an open connection",
				req, resp.StatusCode, resp.Header.Get(httpproxy.OverflowHeader), resp.Close)
		}
	}
	unhold()
	if r := <-hold; r.err != nil || r.code != 200 {
		t.Fatalf("held request: %+v", r)
	}
	// The held request's slot is released just after its answer is written:
	// the client can see the answer a moment before there is room.
	b := s.snap.Load().Cluster("app").Breaker
	testkit.Eventually(t, 5*time.Second, "the held request's breaker slot released", func() bool { return b.Available(circuitbreak.Requests) })
	if resp := send("GET /c HTTP/1.1\r\nHost: svc\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("after the overflow, on the same connection: %d, want 200", resp.StatusCode)
	}
}
