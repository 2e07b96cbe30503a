package resilience

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Overload drills (issue #7): the real bin/sidecar under connection floods, a
// stalled upstream and body-heavy load, measured from outside (/proc and its
// /metrics).

// procStatus reads one "Name:   value kB" field of /proc/<pid>/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || len(f) != 2 || f[1] != "kB" {
				t.Fatalf("/proc/%d/status %s: %q", pid, field, v)
			}
			return n << 10
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

func rss(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmRSS") }

// sockets counts the process's open sockets (/proc/<pid>/fd links "socket:[inode]").
func sockets(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// raiseNoFile lifts this process's open-file soft limit to at least n.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	if l.Max < n {
		t.Fatalf("RLIMIT_NOFILE hard limit %d < %d needed by this drill (raise it: ulimit -Hn)", l.Max, n)
	}
	l.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// dialAll opens n connections to addr with a few dialers in parallel.
func dialAll(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 10 * time.Second}
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					select {
					case errs <- fmt.Errorf("dial %d: %w", i, err):
					default:
					}
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return conns
}

// Drill (a): with the sidecar at its connection bound, 10,000 more idle
// connections are each closed at once, counted as refused, and cost the sidecar
// less than 10 MiB of RSS. The admitted connections stay open.
func TestDrillConnectionFloodRefused(t *testing.T) {
	const limit, extra = 1000, 10000
	const maxGrowth = 10 << 20
	raiseNoFile(t, limit+extra+1000)
	ip := "127.79.0.1"
	priv := drillkit.NewKey(t)
	w := drillkit.NewWorkload(t, ip, "reviews-v1-a", priv.Public().(ed25519.PublicKey))
	drillkit.StartApp(t, ip+":8080", "app")
	pilot := drillkit.NewRefServer(t, ip+":15010", priv, w.NodeID)
	pilot.Push(drillkit.MeshTo(w, ip+":8080"), 1, 0)
	// A header timeout longer than the drill, so admitted idle connections stay.
	sc := drillkit.StartSidecar(t, w, pilot.Addr(), "--max-connections", strconv.Itoa(limit), "--read-header-timeout", "2m")
	sc.WaitReady(10 * time.Second)
	pid := sc.Cmd.Process.Pid
	// The real process's default route timeout is Envoy's 15s.
	if v := sc.Metric(`weft_sidecar_limit{limit="default_route_timeout_seconds"}`); v != 15 {
		t.Errorf("default route timeout without the flag: %v s, want 15", v)
	}
	start := time.Now()
	admitted := dialAll(t, w.Outbound(), limit)
	testkit.Eventually(t, 10*time.Second, "the bound's connections accepted", func() bool {
		return sc.Metric("weft_sidecar_downstream_connections_sidecar") == limit
	})
	before := rss(t, pid)
	flood := dialAll(t, w.Outbound(), extra)
	refusedSeries := `weft_sidecar_downstream_connections_refused_total{listener="outbound",reason="sidecar_max_connections"}`
	testkit.Eventually(t, 20*time.Second, "10,000 refusals counted", func() bool { return sc.Metric(refusedSeries) == extra })
	after := rss(t, pid)
	// Every flood connection was closed by the sidecar (EOF, no byte sent).
	for i, c := range flood {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("flood connection %d: read %d, %v; want EOF (closed at once)", i, n, err)
		}
	}
	// The admitted ones are still open: a request on one of them is answered.
	if got := sc.Metric("weft_sidecar_downstream_connections_sidecar"); got != limit {
		t.Errorf("open connections after the flood: %v, want %d", got, limit)
	}
	c := admitted[0]
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: reviews\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request on an admitted connection: %v %v", resp, err)
	}
	t.Logf("limit %d, flood %d: RSS %s before, %s after (+%s); refused in %s", limit, extra, mib(before), mib(after),
		mib(after-before), time.Since(start).Round(time.Millisecond))
	if after-before > maxGrowth {
		t.Errorf("RSS grew %s refusing %d connections, limit %s", mib(after-before), extra, mib(maxGrowth))
	}
}

// slowApp accepts HTTP requests and never answers them; active counts handlers
// still waiting (each ends when the sidecar closes its upstream connection).
type slowApp struct{ active atomic.Int64 }

func startSlowApp(t *testing.T, addr string) *slowApp {
	t.Helper()
	a := &slowApp{}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.active.Add(1)
		defer a.active.Add(-1)
		<-r.Context().Done()
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

// meshDefaultTimeout is meshTo with a route that sets no timeout, so the
// sidecar's --default-route-timeout applies.
func meshDefaultTimeout(w drillkit.Workload, apps ...string) dt.Resources {
	r := drillkit.MeshTo(w, apps...)
	r[xdsresource.RouteType] = []proto.Message{dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", -1)))}
	return r
}

// Drill (b): requests to an upstream that never answers, on a route without a
// timeout, end at the default route timeout with 504 x-weft-timeout, and every
// goroutine and socket they held is released.
func TestDrillSlowUpstreamFreedByDefaultTimeout(t *testing.T) {
	const n = 200
	// Long enough that all n requests are at the upstream at once before the first
	// times out, even on a loaded machine (at 1s a run under a CPU hog timed the
	// first ones out before the last arrived); the peak assertions need them all.
	const timeout = 3 * time.Second
	ip := "127.79.0.2"
	priv := drillkit.NewKey(t)
	w := drillkit.NewWorkload(t, ip, "reviews-v1-a", priv.Public().(ed25519.PublicKey))
	app := startSlowApp(t, ip+":8080")
	pilot := drillkit.NewRefServer(t, ip+":15010", priv, w.NodeID)
	pilot.Push(meshDefaultTimeout(w, ip+":8080"), 1, 0)
	sc := drillkit.StartSidecar(t, w, pilot.Addr(), "--default-route-timeout", timeout.String())
	sc.WaitReady(10 * time.Second)
	pid := sc.Cmd.Process.Pid
	if v := sc.Metric(`weft_sidecar_limit{limit="default_route_timeout_seconds"}`); v != timeout.Seconds() {
		t.Fatalf("default route timeout %v s, want %v", v, timeout.Seconds())
	}
	client := &http.Client{Timeout: 10 * timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	want := "default=" + timeout.String()
	call := func() error {
		code, body, h, err := drillkit.Get(client, w, "reviews", "/slow")
		if err != nil {
			return err
		}
		if code != http.StatusGatewayTimeout || h.Get(httpproxy.TimeoutHeader) != want {
			return fmt.Errorf("%d %s=%q %q, want 504 %q", code, httpproxy.TimeoutHeader, h.Get(httpproxy.TimeoutHeader), body, want)
		}
		return nil
	}
	// One request first, so whatever the request path starts once (pools,
	// timers) is in the baseline.
	if err := call(); err != nil {
		t.Fatal(err)
	}
	var baseG float64
	var baseS int
	settled := func() bool {
		return app.active.Load() == 0 && sc.Metric(`weft_sidecar_downstream_connections{listener="outbound"}`) == 0
	}
	testkit.Eventually(t, 10*time.Second, "warm-up request released", settled)
	baseG, baseS = sc.Metric("go_goroutines"), sockets(t, pid)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(); err != nil {
				errs <- err
			}
		}()
	}
	var peakG float64
	var peakS int
	testkit.Eventually(t, 10*time.Second, "all requests at the slow upstream", func() bool {
		peakG, peakS = max(peakG, sc.Metric("go_goroutines")), max(peakS, sockets(t, pid))
		return app.active.Load() == n
	})
	peakG, peakS = max(peakG, sc.Metric("go_goroutines")), max(peakS, sockets(t, pid))
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("%d requests answered after %s, want about %s", n, took, timeout)
	}
	var g float64
	var s int
	testkit.Eventually(t, 10*time.Second, "every goroutine and socket released", func() bool {
		if !settled() {
			return false
		}
		g, s = sc.Metric("go_goroutines"), sockets(t, pid)
		return g <= baseG && s <= baseS
	})
	t.Logf("%d requests to a stalled upstream, default route timeout %s: answered 504 in %s; goroutines %v before, %v peak, %v after; sockets %d before, %d peak, %d after",
		n, timeout, took.Round(time.Millisecond), baseG, peakG, g, baseS, peakS, s)
	// Each request held at least a goroutine and a socket (two: client and upstream).
	if peakG-g < n || peakS-s < 2*n {
		t.Errorf("peak goroutines %v, sockets %d over %v, %d after: the load did not show (want %d more of each, twice as many sockets)", peakG, peakS, g, s, n)
	}
}

// stuckUpstream accepts connections and reads nothing, with a small receive
// buffer, so the sidecar is left holding request bodies it cannot forward.
func startStuckUpstream(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return &accepted
}

// Drill (c): large uploads to an upstream that takes nothing pile request bodies
// up in the sidecar; before its memory ceiling, new requests are shed with 503
// x-weft-overflow: memory, its RSS stays near the ceiling, and it keeps
// answering and recovers when the load ends.
func TestDrillMemoryShedding(t *testing.T) {
	const limit = 96 << 20
	const highWater = 0.5
	const uploads, bodySize = 300, 2 << 20
	raiseNoFile(t, 4*uploads+1000)
	ip := "127.79.0.3"
	priv := drillkit.NewKey(t)
	w := drillkit.NewWorkload(t, ip, "reviews-v1-a", priv.Public().(ed25519.PublicKey))
	drillkit.StartApp(t, ip+":8081", "app")
	accepted := startStuckUpstream(t, ip+":8080")
	pilot := drillkit.NewRefServer(t, ip+":15010", priv, w.NodeID)
	// "reviews" goes to the stuck upstream, "ratings" to a healthy app.
	res := drillkit.MeshTo(w, ip+":8080")
	res[xdsresource.RouteType] = []proto.Message{dt.RouteConfig("routes",
		dt.VirtualHost("ratings", []string{"ratings"}, dt.PrefixRoute("/", "healthy", 0)),
		dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", 0)))}
	res.Add(xdsresource.ClusterType, dt.EDSCluster("healthy", dt.ClusterOpts{MaxConns: 4096, MaxPend: 4096, MaxReqs: 65536}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("healthy", dt.MustAddr(ip+":8081")))
	pilot.Push(res, 1, 0)
	sc := drillkit.StartSidecar(t, w, pilot.Addr(), "--memory-limit", strconv.Itoa(limit), "--memory-high-water", fmt.Sprint(highWater))
	sc.WaitReady(10 * time.Second)
	pid := sc.Cmd.Process.Pid
	idle, idleUsed := rss(t, pid), sc.Metric("weft_sidecar_memory_used_bytes")
	// The ceiling is the Go runtime's soft limit in the real process.
	if v := sc.Metric("go_gc_gomemlimit_bytes"); v != limit {
		t.Errorf("go_gc_gomemlimit_bytes = %v, want --memory-limit %d", v, limit)
	}

	// Each upload on its own HTTP/2 connection (each with its own 1 MiB window
	// the sidecar grants), started a few at a time so new requests keep arriving
	// while the bodies pile up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var shed, other atomic.Int64
	var wg sync.WaitGroup
	var peak atomic.Int64
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for ctx.Err() == nil {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
						if n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil && n<<10 > peak.Load() {
							peak.Store(n << 10)
						}
					}
				}
			}
			time.Sleep(20 * time.Millisecond) // the RSS sampler's interval, not a wait for a condition
		}
	}()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	body := strings.Repeat("x", bodySize)
	start := time.Now()
	var trs []*http.Transport
	closeClients := func() {
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
	}
	defer closeClients()
	for i := range uploads {
		tr := &http.Transport{Protocols: &p}
		trs = append(trs, tr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.Outbound()+"/upload", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Host = "reviews"
			resp, err := tr.RoundTrip(req)
			if err != nil {
				return // cancelled at the end: the upload was stuck, as meant
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(httpproxy.OverflowHeader) == httpproxy.OverflowMemory {
				shed.Add(1)
			} else {
				other.Add(1)
			}
		}()
		if i%10 == 9 {
			time.Sleep(20 * time.Millisecond) // arrivals spread over time (500/s), not one burst
		}
	}
	testkit.Eventually(t, 20*time.Second, "requests shed for memory", func() bool { return shed.Load() > 0 })
	shedAt := time.Since(start)
	// Still answering while shedding: the admin endpoint, and the metrics say so.
	// The shed counter, not the shedding gauge: the gauge may already be back at 0
	// here (a GC while shedding can bring use under the hysteresis mark between the
	// shed answer and this scrape); the gauge's transitions are table-tested in
	// sidecar/overload.
	if v := sc.Metric("weft_sidecar_memory_shed_requests_total"); v < 1 {
		t.Errorf("weft_sidecar_memory_shed_requests_total = %v after a client saw a memory shed", v)
	}
	usedShedding := sc.Metric("weft_sidecar_memory_used_bytes")
	if usedShedding >= limit {
		t.Errorf("memory in use %s while shedding: at or past the ceiling %s", mib(int64(usedShedding)), mib(limit))
	}
	// Let every upload reach its answer or get stuck, then end the load.
	testkit.Eventually(t, 20*time.Second, "every upload answered or stuck", func() bool {
		return float64(shed.Load()+other.Load())+sc.Metric(`weft_sidecar_downstream_requests_active{listener="outbound"}`) >= uploads
	})
	stuck := sc.Metric(`weft_sidecar_downstream_requests_active{listener="outbound"}`)
	// The load ends: the clients give up and go away.
	cancel()
	wg.Wait()
	<-sampleDone
	closeClients()
	if other.Load() != 0 {
		t.Errorf("%d uploads answered with something other than a memory shed", other.Load())
	}
	select {
	case <-sc.Exited():
		t.Fatalf("sidecar exited under load:\n%s", sc.Logs.String())
	default:
	}
	// Recovered: shedding stops and a new request is served.
	testkit.Eventually(t, 15*time.Second, "shedding stopped after the load", func() bool {
		return sc.Metric("weft_sidecar_memory_shedding") == 0
	})
	if code, body, _, err := drillkit.Get(drillkit.Client, w, "ratings", "/after"); err != nil || code != http.StatusOK {
		t.Fatalf("request after the load: %d %q %v", code, body, err)
	}
	sheds := sc.Metric("weft_sidecar_memory_shed_requests_total")
	t.Logf("ceiling %s, high water %.0f%% (%s): idle RSS %s (runtime %s); %d uploads of %s: %d stuck in the sidecar (%d upstream conns), %d shed (metric %v), first shed after %s at %s in use; peak RSS %s",
		mib(limit), highWater*100, mib(int64(highWater*limit)), mib(idle), mib(int64(idleUsed)), uploads, mib(bodySize), int(stuck), accepted.Load(),
		shed.Load(), sheds, shedAt.Round(time.Millisecond), mib(int64(usedShedding)), mib(peak.Load()))
	if pk := peak.Load(); pk > limit*5/4 {
		t.Errorf("peak RSS %s: past the ceiling %s by more than a quarter", mib(pk), mib(limit))
	}
	if sheds < float64(shed.Load()) {
		t.Errorf("metric counts %v sheds, clients saw %d", sheds, shed.Load())
	}
}
