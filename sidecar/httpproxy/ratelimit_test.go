package httpproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// slowRate refills one token per 20s: no test here lasts long enough to see a
// refill, so what a test spends is exactly its burst.
const slowRate = 0.05

// limited sets c's local rate limit as pilot writes it.
func limited(c *clusterv3.Cluster, rps float64, burst uint32, dryRun bool) *clusterv3.Cluster {
	c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{xdsresource.RateLimitMetadataKey: {Fields: map[string]*structpb.Value{
		"requestsPerSecond": structpb.NewNumberValue(rps),
		"burst":             structpb.NewNumberValue(float64(burst)),
		"dryRun":            structpb.NewBoolValue(dryRun),
	}}}}
	return c
}

const (
	v1Cluster  = "outbound|9080|v1|reviews.shop.svc.cluster.local"
	v2Cluster  = "outbound|9080|v2|reviews.shop.svc.cluster.local"
	reviewsKey = "outbound|9080||reviews.shop.svc.cluster.local"
)

// reviewsMesh is an outbound listener routing host "v1" to subset cluster v1
// and "v2" to subset v2 of one Service, both limited to burst requests, and
// host "free" to an unlimited cluster.
func reviewsMesh(ln net.Listener, app *app, burst uint32, dryRun bool) dt.Resources {
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes",
		dt.VirtualHost("v1", []string{"v1"}, dt.PrefixRoute("/", v1Cluster, 0)),
		dt.VirtualHost("v2", []string{"v2"}, dt.PrefixRoute("/", v2Cluster, 0)),
		dt.VirtualHost("free", []string{"free"}, dt.PrefixRoute("/", "free", 0))))
	for _, name := range []string{v1Cluster, v2Cluster, "free"} {
		c := dt.EDSCluster(name, dt.ClusterOpts{})
		if name != "free" {
			limited(c, slowRate, burst, dryRun)
		}
		r.Add(xdsresource.ClusterType, c)
		r.Add(xdsresource.EndpointType, dt.Endpoints(name, app.ap()))
	}
	return r
}

// checkRateLimited checks a 429 answer's headers: the service key whose limit
// refused, retry-after in whole seconds up to the refill interval.
func checkRateLimited(t *testing.T, resp *http.Response, key string) {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("got %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get(httpproxy.LocalHeader); got != httpproxy.LocalRateLimit {
		t.Errorf("%s: %q, want %q", httpproxy.LocalHeader, got, httpproxy.LocalRateLimit)
	}
	if got := resp.Header.Get(httpproxy.RateLimitedHeader); got != key {
		t.Errorf("%s: %q, want %q", httpproxy.RateLimitedHeader, got, key)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > int(1/slowRate) {
		t.Errorf("retry-after: %q, want whole seconds in 1..%d", resp.Header.Get("Retry-After"), int(1/slowRate))
	}
}

// TestRateLimitOutbound: a client sidecar's limit is per Service: subset
// clusters spend one bucket, over HTTP/1.1 and HTTP/2 alike; the request past
// the burst is answered 429 without reaching the app; another cluster is
// unaffected; a refused request's body is consumed and the connection kept.
func TestRateLimitOutbound(t *testing.T) {
	const burst = 3
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			a := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); w.Write([]byte("ok")) })
			ln := listen(t)
			s := startSidecar(t, ln, reviewsMesh(ln, a, burst, false), sidecarOpts{})
			c := p.client(t)
			url := "http://" + s.Addr.String() + "/"
			for i, host := range []string{"v1", "v2", "v1"} {
				if resp, body := do(t, c, "GET", url, host, ""); resp.StatusCode != 200 {
					t.Fatalf("request %d (%s), within the burst: %d %q", i+1, host, resp.StatusCode, body)
				}
			}
			for _, host := range []string{"v1", "v2"} {
				resp, _ := do(t, c, "POST", url, host, "a body the sidecar must consume")
				checkRateLimited(t, resp, reviewsKey)
			}
			if n := a.reqs.Load(); n != burst {
				t.Errorf("app saw %d requests, want %d (refused ones must not reach it)", n, burst)
			}
			if resp, body := do(t, c, "GET", url, "free", ""); resp.StatusCode != 200 {
				t.Errorf("unlimited cluster: %d %q", resp.StatusCode, body)
			}
			st := s.snap.Load().Cluster(v1Cluster).Shared.Limiter.Stats()
			if want := (ratelimit.Stats{Allowed: burst, Rejected: 2}); st != want {
				t.Errorf("limiter stats %+v, want %+v", st, want)
			}
		})
	}
}

// TestRateLimitKeepsConnection: HTTP/1.1: the 429 is answered on the same
// keep-alive connection, its body consumed, and the next request is served.
func TestRateLimitKeepsConnection(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	ln := listen(t)
	s := startSidecar(t, ln, reviewsMesh(ln, a, 1, false), sidecarOpts{})
	conn, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i, req := range []string{
		"GET / HTTP/1.1\r\nHost: v1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: v1\r\nContent-Length: 5\r\n\r\nhello",
		"GET / HTTP/1.1\r\nHost: free\r\n\r\n",
	} {
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := []int{200, 429, 200}[i]
		if resp.StatusCode != want || resp.Close {
			t.Fatalf("request %d: %d (close %v), want %d on a kept connection", i+1, resp.StatusCode, resp.Close, want)
		}
	}
}

// TestRateLimitDryRun: in dry run every request is served and the ones past
// the burst are counted.
func TestRateLimitDryRun(t *testing.T) {
	const burst, n = 2, 6
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			a := startApp(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
			ln := listen(t)
			s := startSidecar(t, ln, reviewsMesh(ln, a, burst, true), sidecarOpts{})
			c := p.client(t)
			for i := range n {
				if resp, body := do(t, c, "GET", "http://"+s.Addr.String()+"/", "v1", ""); resp.StatusCode != 200 {
					t.Fatalf("request %d in dry run: %d %q", i+1, resp.StatusCode, body)
				}
			}
			st := s.snap.Load().Cluster(v1Cluster).Shared.Limiter.Stats()
			if want := (ratelimit.Stats{Allowed: burst, DryRunRejected: n - burst}); st != want {
				t.Errorf("limiter stats %+v, want %+v", st, want)
			}
		})
	}
}

// TestRateLimitGRPC: a gRPC caller refused by the limit gets UNAVAILABLE (as
// Envoy maps 429), with the same headers.
func TestRateLimitGRPC(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	ln := listen(t)
	s := startSidecar(t, ln, reviewsMesh(ln, a, 1, false), sidecarOpts{})
	c := h2cClient(t)
	var resp *http.Response
	for range 2 {
		req, err := http.NewRequest("POST", "http://"+s.Addr.String()+"/pkg.Svc/Method", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "v1"
		req.Header.Set("Content-Type", "application/grpc")
		if resp, err = c.Do(req); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "14" {
		t.Fatalf("refused gRPC call: %d grpc-status %q, want 200 with grpc-status 14", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
	if resp.Header.Get(httpproxy.RateLimitedHeader) != reviewsKey || resp.Header.Get(httpproxy.LocalHeader) != httpproxy.LocalRateLimit {
		t.Errorf("headers %v", resp.Header)
	}
}

// TestRateLimitBridgedOnce: an HTTP/1.1 request to an HTTP/2 cluster goes
// through the general path, and is still counted once.
func TestRateLimitBridgedOnce(t *testing.T) {
	a := startH2App(t)
	ln := listen(t)
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", v1Cluster, 0))))
	r.Add(xdsresource.ClusterType, limited(dt.EDSCluster(v1Cluster, dt.ClusterOpts{HTTP2: true}), slowRate, 2, false))
	r.Add(xdsresource.EndpointType, dt.Endpoints(v1Cluster, a))
	s := startSidecar(t, ln, r, sidecarOpts{})
	c := client(t)
	codes := []int{}
	for range 3 {
		resp, _ := do(t, c, "GET", "http://"+s.Addr.String()+"/", "svc", "")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("codes %v, want [200 200 429]", codes)
	}
	if st := s.snap.Load().Cluster(v1Cluster).Shared.Limiter.Stats(); st != (ratelimit.Stats{Allowed: 2, Rejected: 1}) {
		t.Errorf("limiter stats %+v: each request must be counted once", st)
	}
}

// TestRateLimitInbound: the limit pilot puts on a sidecar's inbound cluster
// holds for what peer sidecars send it (HTTP/2 from the client sidecar) and
// for plain HTTP/1.1 callers; the 429 reaches the client through the client
// sidecar with the inbound key.
func TestRateLimitInbound(t *testing.T) {
	const inCluster = "inbound|8080||"
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	inLn, outLn := listen(t), listen(t)
	in := dt.Resources{}
	in.Add(xdsresource.ListenerType, dt.Listener("inbound", addrOf(inLn), dt.HTTPChain(0, "inbound")))
	in.Add(xdsresource.RouteType, dt.RouteConfig("inbound", dt.VirtualHost("in", []string{"*"}, dt.PrefixRoute("/", inCluster, 0))))
	in.Add(xdsresource.ClusterType, limited(dt.EDSCluster(inCluster, dt.ClusterOpts{}), slowRate, 2, false))
	in.Add(xdsresource.EndpointType, dt.Endpoints(inCluster, a.ap()))
	inbound := startSidecar(t, inLn, in, sidecarOpts{name: "inbound"})
	out := dt.Resources{}
	out.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(outLn), "routes"))
	out.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "svc", 0))))
	out.Add(xdsresource.ClusterType, dt.EDSCluster("svc", dt.ClusterOpts{}))
	out.Add(xdsresource.EndpointType, dt.MarkPeer(dt.Endpoints("svc", addrOf(inLn)), addrOf(inLn)))
	outbound := startSidecar(t, outLn, out, sidecarOpts{})
	c := client(t)
	// One through the client sidecar (HTTP/2 to the peer), one straight to the
	// inbound listener over HTTP/1.1: the burst of 2 is spent.
	if resp, body := do(t, c, "GET", "http://"+outbound.Addr.String()+"/", "svc", ""); resp.StatusCode != 200 {
		t.Fatalf("via the peer: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, c, "GET", "http://"+inbound.Addr.String()+"/", "svc", ""); resp.StatusCode != 200 {
		t.Fatalf("direct: %d %q", resp.StatusCode, body)
	}
	resp, _ := do(t, c, "GET", "http://"+outbound.Addr.String()+"/", "svc", "")
	checkRateLimited(t, resp, inCluster)
	resp, _ = do(t, h2cClient(t), "GET", "http://"+inbound.Addr.String()+"/", "svc", "")
	checkRateLimited(t, resp, inCluster)
	if n := a.reqs.Load(); n != 2 {
		t.Errorf("app saw %d requests, want 2", n)
	}
	if st := inbound.snap.Load().Cluster(inCluster).Shared.Limiter.Stats(); st != (ratelimit.Stats{Allowed: 2, Rejected: 2}) {
		t.Errorf("inbound limiter stats %+v", st)
	}
}

// TestRateLimitTCP: on a TCP cluster a connection is one request: past the
// burst a connection is closed before anything reaches the upstream.
func TestRateLimitTCP(t *testing.T) {
	echo := dt.ServeTCP(t, dt.Echo)
	ln := listen(t)
	r := dt.Resources{}
	r.Add(xdsresource.ListenerType, dt.Listener("tcp", addrOf(ln), dt.TCPChain(0, "raw")))
	r.Add(xdsresource.ClusterType, limited(dt.EDSCluster("raw", dt.ClusterOpts{}), slowRate, 1, false))
	r.Add(xdsresource.EndpointType, dt.Endpoints("raw", echo))
	s := startSidecar(t, ln, r, sidecarOpts{name: "tcp"})
	roundTrip := func() error {
		c, err := net.Dial("tcp", s.Addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		return nil
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if err := roundTrip(); err == nil {
		t.Fatal("second connection echoed: the limit of one connection was not enforced")
	}
	if st := s.snap.Load().Cluster("raw").Shared.Limiter.Stats(); st != (ratelimit.Stats{Allowed: 1, Rejected: 1}) {
		t.Errorf("limiter stats %+v", st)
	}
}

// startH2App is an application speaking prior-knowledge HTTP/2 (h2c).
func startH2App(t *testing.T) netip.AddrPort {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// BenchmarkHTTP1ProxyRateLimited is BenchmarkHTTP1Proxy with a local rate limit
// on the cluster that never refuses (10⁹ rps): the check's cost on the request
// path; allocs/op must equal BenchmarkHTTP1Proxy's.
func BenchmarkHTTP1ProxyRateLimited(b *testing.B) {
	benchHTTP1With(b, sidecarOpts{}, func(r dt.Resources) dt.Resources {
		for _, m := range r[xdsresource.ClusterType] {
			limited(m.(*clusterv3.Cluster), xdsresource.MaxRateLimitRPS, xdsresource.MaxRateLimitBurst/2, false)
		}
		return r
	})
}

// TestRateLimitFallback: a request that falls back to a fallback destination
// spends a token of that Service's limit: past its burst the next fallback
// serves (x-weft-priority names it), and when the refusing fallback is the last
// the request is answered 429 naming its key, never reaching it. Over HTTP/1.1
// (with a body kept for replay, and without) and HTTP/2; the HTTP/1.1 client
// connection stays usable after the 429.
func TestRateLimitFallback(t *testing.T) {
	const burst = 2
	for _, proto := range protos {
		for _, body := range []string{"", "a body kept for replay"} {
			t.Run(proto+" body="+strconv.Quote(body), func(t *testing.T) {
				limitedApp := startApp(t, func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					io.WriteString(w, "limited")
				})
				backup := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, "backup") })
				ln := listen(t)
				res := dt.Resources{}
				res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
				res.Add(xdsresource.RouteType, dt.RouteConfig("routes",
					dt.VirtualHost("last", []string{"last"}, withFallback(dt.PrefixRoute("/", "dead", 0), "limited")),
					dt.VirtualHost("next", []string{"next"}, withFallback(dt.PrefixRoute("/", "dead", 0), "limited", "backup"))))
				for name, ep := range map[string]netip.AddrPort{"dead": deadAddr(t), "limited": limitedApp.ap(), "backup": backup.ap()} {
					c := dt.EDSCluster(name, dt.ClusterOpts{Connect: time.Second})
					if name == "limited" {
						limited(c, slowRate, burst, false)
					}
					res.Add(xdsresource.ClusterType, c)
					res.Add(xdsresource.EndpointType, dt.Endpoints(name, ep))
				}
				s := startSidecar(t, ln, res, sidecarOpts{})
				c := clientFor(t, proto)
				url := "http://" + s.Addr.String() + "/"
				method := "GET"
				if body != "" {
					method = "POST"
				}
				for i := range burst {
					resp, got := do(t, c, method, url, "last", body)
					if resp.StatusCode != 200 || got != "limited" || resp.Header.Get(httpproxy.PriorityHeader) != "1" {
						t.Fatalf("request %d within the fallback's burst: %d %q %s=%q, want 200 from priority 1",
							i+1, resp.StatusCode, got, httpproxy.PriorityHeader, resp.Header.Get(httpproxy.PriorityHeader))
					}
				}
				// The fallback's bucket is empty: the next fallback serves.
				resp, got := do(t, c, method, url, "next", body)
				if resp.StatusCode != 200 || got != "backup" || resp.Header.Get(httpproxy.PriorityHeader) != "2" {
					t.Errorf("refused by the first fallback's limit: %d %q %s=%q, want 200 from priority 2",
						resp.StatusCode, got, httpproxy.PriorityHeader, resp.Header.Get(httpproxy.PriorityHeader))
				}
				// The last fallback refused: 429 naming it.
				resp, _ = do(t, c, method, url, "last", body)
				checkRateLimited(t, resp, "limited")
				if n := limitedApp.reqs.Load(); n != burst {
					t.Errorf("the limited fallback saw %d requests, want %d (refused ones must not reach it)", n, burst)
				}
				// The client connection still serves (a kept body was not read twice).
				if resp, got := do(t, c, method, url, "next", body); resp.StatusCode != 200 || got != "backup" {
					t.Errorf("after the 429: %d %q, want 200 from the backup", resp.StatusCode, got)
				}
				st := s.snap.Load().Cluster("limited").Shared.Limiter.Stats()
				if want := (ratelimit.Stats{Allowed: burst, Rejected: 3}); st != want {
					t.Errorf("limiter stats %+v, want %+v", st, want)
				}
			})
		}
	}
}
