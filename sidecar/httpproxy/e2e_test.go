package httpproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Path", r.URL.RequestURI())
	w.Header().Set("X-Host", r.Host)
	w.Header().Set("X-Proto", r.Proto)
	w.Header().Set("X-Te", strings.Join(r.TransferEncoding, ","))
	fmt.Fprintf(w, "%s %s body=%s", r.Method, r.URL.Path, b)
}

// oneRoute is a config whose single route is given, with clusters named after apps.
func oneRoute(listen netip.AddrPort, rt *routev3.Route, clusters map[string][]netip.AddrPort) dt.Resources {
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", listen, "routes"))
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"svc", "svc:80"}, rt)))
	for name, eps := range clusters {
		r.Add(xdsresource.ClusterType, dt.EDSCluster(name, dt.ClusterOpts{Connect: time.Second}))
		r.Add(xdsresource.EndpointType, dt.Endpoints(name, eps...))
	}
	return r
}

func do(t *testing.T, c *http.Client, method, url, host, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return resp, string(b)
}

func TestHTTP1Proxying(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		echo(w, r)
	})
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "app", 5*time.Second), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{})
	c := client(t)
	url := "http://" + s.Addr.String()
	tests := []struct {
		method, path, host, body string
		status                   int
		wantBody                 string
	}{
		{"GET", "/a?x=1", "svc", "", 200, "GET /a body="},
		{"POST", "/post", "svc:80", "hello", 200, "POST /post body=hello"},
		{"GET", "/stream", "svc", "", 200, "part0;part1;part2;"},
		{"HEAD", "/h", "svc", "", 200, ""},
		{"GET", "/", "other", "", 404, `no virtual host for host: looked for host "other" port ` + strconv.Itoa(int(s.Addr.Port())) + ` on listener outbound; host "other" is served on no port of listener outbound` + "\n"},
	}
	for _, tc := range tests {
		resp, body := do(t, c, tc.method, url+tc.path, tc.host, tc.body)
		if resp.StatusCode != tc.status || body != tc.wantBody {
			t.Errorf("%s %s host %s: %d %q, want %d %q", tc.method, tc.path, tc.host, resp.StatusCode, body, tc.status, tc.wantBody)
		}
	}
	// A chunked request body arrives intact and chunked framing is kept.
	req, _ := http.NewRequest("PUT", url+"/chunked", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")))
	req.Host = "svc"
	req.ContentLength = -1
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "PUT /chunked body=abcd" || resp.Header.Get("X-Te") != "chunked" {
		t.Errorf("chunked PUT: %q te=%q", b, resp.Header.Get("X-Te"))
	}
	// Keep-alive upstream: many sequential requests reuse one upstream connection.
	before := a.conns.Load()
	for range 20 {
		if resp, _ := do(t, c, "GET", url+"/", "svc", ""); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if n := a.conns.Load() - before; n > 1 {
		t.Errorf("20 sequential requests opened %d new upstream connections, want ≤ 1", n)
	}
}

// TestHTTP1Malformed: bad requests get a 4xx with a reason, never reach the app.
func TestHTTP1Malformed(t *testing.T) {
	a := startApp(t, echo)
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "app", 0), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{})
	tests := []struct{ raw, wantLine string }{
		{"GET / HTTP/1.1\r\nHost: svc\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"GET / HTTP/1.1\r\nHost: svc\r\n folded\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"GET / HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 501 Not Implemented"},
		{"GET / HTTP/2.0\r\nHost: svc\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"GET / HTTP/1.1\r\nHost: svc\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"},
	}
	for _, tc := range tests {
		c, err := net.Dial("tcp", s.Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.WriteString(c, tc.raw) }()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || strings.TrimSpace(line) != tc.wantLine {
			t.Errorf("%.40q: got %q %v, want %q", tc.raw, line, err, tc.wantLine)
		}
	}
	if n := a.reqs.Load(); n != 0 {
		t.Errorf("app saw %d requests, want 0", n)
	}
}

func TestDegradedFailsClosed(t *testing.T) {
	a := startApp(t, echo)
	ln := listen(t)
	var degraded atomic.Bool
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "app", 0), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{
		degraded: func() (string, bool) { return "routes expired", degraded.Load() },
	})
	for _, c := range []*http.Client{client(t), h2cClient(t)} {
		degraded.Store(true)
		resp, _ := do(t, c, "GET", "http://"+s.Addr.String()+"/", "svc", "")
		if resp.StatusCode != 503 || resp.Header.Get(httpproxy.DegradedHeader) != "routes expired" {
			t.Errorf("%s degraded: %d %q", resp.Proto, resp.StatusCode, resp.Header.Get(httpproxy.DegradedHeader))
		}
		degraded.Store(false)
		if resp, _ := do(t, c, "GET", "http://"+s.Addr.String()+"/", "svc", ""); resp.StatusCode != 200 || resp.Header.Get(httpproxy.DegradedHeader) != "" {
			t.Errorf("%s recovered: %d", resp.Proto, resp.StatusCode)
		}
	}
}

func retryRoute(cluster, retryOn string, n uint32, timeout, perTry time.Duration) *routev3.Route {
	r := dt.PrefixRoute("/", cluster, timeout)
	r.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: retryOn, NumRetries: wrapperspb.UInt32(n)}
	if perTry > 0 {
		r.GetRoute().RetryPolicy.PerTryTimeout = durationpb.New(perTry)
	}
	return r
}

// deadAddr is a loopback port nobody listens on.
func deadAddr(t *testing.T) netip.AddrPort {
	ln := listen(t)
	a := addrOf(ln)
	ln.Close()
	return a
}

func TestRetriesFallbackTimeouts(t *testing.T) {
	var fails atomic.Int64
	flaky := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if fails.Add(-1) >= 0 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		echo(w, r)
	})
	slow := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	backup := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "backup") })
	dead := deadAddr(t)
	withFallback := func(r *routev3.Route, fb ...any) *routev3.Route {
		s, _ := structpb.NewStruct(map[string]any{"clusters": fb})
		r.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft.fallback": s}}
		return r
	}
	eps := map[string][]netip.AddrPort{"flaky": {flaky.ap()}, "slow": {slow.ap()}, "backup": {backup.ap()}, "dead": {dead}}
	tests := []struct {
		name       string
		route      *routev3.Route
		fails      int64
		method     string
		wantStatus int
		wantBody   string
		wantFlaky  int64 // requests the flaky app saw
		maxTime    time.Duration
	}{
		{"retry 5xx until success", retryRoute("flaky", "5xx", 3, 0, 0), 2, "GET", 200, "GET / body=", 3, 5 * time.Second},
		{"retries exhausted forward last", retryRoute("flaky", "5xx", 1, 0, 0), 5, "GET", 503, "try again\n", 2, 5 * time.Second},
		{"retry with a kept body", retryRoute("flaky", "5xx", 3, 0, 0), 2, "POST", 200, "POST / body=x", 3, 5 * time.Second},
		{"connect failure retried then fails", retryRoute("dead", "connect-failure", 2, 0, 0), 0, "GET", 503,
			"upstream connect error or disconnect/reset before headers\n", 0, 5 * time.Second},
		{"fallback on connect failure", withFallback(dt.PrefixRoute("/", "dead", 0), "backup"), 0, "GET", 200, "backup", 0, 5 * time.Second},
		{"route timeout", dt.PrefixRoute("/", "slow", 100*time.Millisecond), 0, "GET", 504, "upstream request timeout\n", 0, 3 * time.Second},
		{"per-try timeout then fallback", withFallback(retryRoute("slow", "reset", 1, 0, 100*time.Millisecond), "backup"), 0, "GET", 200, "backup", 0, 3 * time.Second},
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		for _, tc := range tests {
			t.Run(proto+" "+tc.name, func(t *testing.T) {
				ln := listen(t)
				s := startSidecar(t, ln, oneRoute(addrOf(ln), tc.route, eps), sidecarOpts{})
				c := client(t)
				if proto == "HTTP/2.0" {
					c = h2cClient(t)
				}
				fails.Store(tc.fails)
				before := flaky.reqs.Load()
				body := ""
				if tc.method == "POST" {
					body = "x"
				}
				start := time.Now()
				resp, got := do(t, c, tc.method, "http://"+s.Addr.String()+"/", "svc", body)
				if resp.StatusCode != tc.wantStatus || got != tc.wantBody {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, tc.wantStatus, tc.wantBody)
				}
				if n := flaky.reqs.Load() - before; n != tc.wantFlaky {
					t.Errorf("flaky app saw %d requests, want %d", n, tc.wantFlaky)
				}
				if d := time.Since(start); d > tc.maxTime {
					t.Errorf("took %v, limit %v", d, tc.maxTime)
				}
			})
		}
	}
}

// TestSwapInFlight: a request started on config A finishes on A after B is stored;
// requests after the swap go to B.
func TestSwapInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	appA := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "A")
	})
	appB := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "B") })
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "app", 0), map[string][]netip.AddrPort{"app": {appA.ap()}}), sidecarOpts{})
	c := client(t)
	url := "http://" + s.Addr.String() + "/"
	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "svc"
		resp, err := c.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-started
	cfgB, err := oneRoute(s.Addr, dt.PrefixRoute("/", "app", 0), map[string][]netip.AddrPort{"app": {appB.ap()}}).Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.snap.Store(cfgB)
	if _, body := do(t, c, "GET", url, "svc", ""); body != "B" {
		t.Errorf("after swap: %q, want B", body)
	}
	close(release)
	if b := <-got; b != "A" {
		t.Errorf("in-flight request: %q, want A", b)
	}
}

// TestMaxRequestsOverflow: with max_requests 1, a second concurrent request is refused
// with 503 while the first is in flight.
func TestMaxRequestsOverflow(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	})
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"*"}, dt.PrefixRoute("/", "app", 0))))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{MaxReqs: 1}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("app", a.ap()))
	s := startSidecar(t, ln, res, sidecarOpts{})
	c := client(t)
	url := "http://" + s.Addr.String() + "/"
	done := make(chan int, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-started
	resp, body := do(t, c, "GET", url, "svc", "")
	if resp.StatusCode != 503 || body != "upstream overflow\n" {
		t.Errorf("second request: %d %q, want 503 upstream overflow", resp.StatusCode, body)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
}

// TestExplicitModeChains: pilot's outbound listener has one chain per service port and
// no default; a client of the explicit listener names the port in Host. The inbound
// listener's default chain serves connections made to its own port.
func TestExplicitModeChains(t *testing.T) {
	a := startApp(t, echo)
	b := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "port80") })
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.Listener("outbound", addrOf(ln), dt.HTTPChain(9080, "9080"), dt.HTTPChain(80, "80")))
	res.Add(xdsresource.RouteType,
		dt.RouteConfig("9080", dt.VirtualHost("svc", []string{"svc:9080"}, dt.PrefixRoute("/", "a", 0))),
		dt.RouteConfig("80", dt.VirtualHost("web", []string{"web", "web:80"}, dt.PrefixRoute("/", "b", 0))))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("a", dt.ClusterOpts{}), dt.EDSCluster("b", dt.ClusterOpts{}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("a", a.ap()), dt.Endpoints("b", b.ap()))
	s := startSidecar(t, ln, res, sidecarOpts{})
	c := client(t)
	tests := []struct {
		host   string
		status int
		body   string
	}{
		{"svc:9080", 200, "GET / body="},
		{"web", 200, "port80"},
		{"svc:1234", 404, `no HTTP route table for port: looked for host "svc:1234" port 1234 on listener outbound; host "svc" is served on port 9080` + "\n"},
		{"nosuch:80", 404, `no virtual host for host: looked for host "nosuch:80" port 80 on listener outbound; host "nosuch" is served on no port of listener outbound` + "\n"},
	}
	for _, tc := range tests {
		resp, body := do(t, c, "GET", "http://"+s.Addr.String()+"/", tc.host, "")
		if resp.StatusCode != tc.status || body != tc.body {
			t.Errorf("Host %s: %d %q, want %d %q", tc.host, resp.StatusCode, body, tc.status, tc.body)
		}
	}
}
