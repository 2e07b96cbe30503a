package httpproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

// statusApp answers the i-th request with codes[i] (body "fail <code>") and every
// later one with 200 and what it read of the body ("ok <n>").
func statusApp(t *testing.T, codes ...int) *app {
	var n atomic.Int64
	return startApp(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if i := n.Add(1) - 1; int(i) < len(codes) {
			w.WriteHeader(codes[i])
			fmt.Fprintf(w, "fail %d", codes[i])
			return
		}
		fmt.Fprintf(w, "ok %d", len(b))
	})
}

// protos are the two ways a client reaches the sidecar: its own HTTP/1.1 path
// and the general path (HTTP/2).
var protos = []string{"HTTP/1.1", "HTTP/2.0"}

func clientFor(t *testing.T, proto string) *http.Client {
	if proto == "HTTP/2.0" {
		return h2cClient(t)
	}
	return client(t)
}

func withFallback(r *routev3.Route, fb ...any) *routev3.Route {
	s, _ := structpb.NewStruct(map[string]any{"clusters": fb})
	r.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{xdsresource.FallbackMetadataKey: s}}
	return r
}

func TestRetryOnStatus(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryOn    string
		retries    uint32
		codes      []int
		wantStatus int
		wantBody   string
		wantTries  int64
	}{
		{"5xx retries 500", "5xx", 3, []int{500}, 200, "ok 0", 2},
		{"5xx retries 501 and 503", "5xx", 3, []int{501, 503}, 200, "ok 0", 3},
		{"5xx forwards 409", "5xx", 3, []int{409}, 409, "fail 409", 1},
		{"gateway-error retries 502 503 504", "gateway-error", 3, []int{502, 503, 504}, 200, "ok 0", 4},
		{"gateway-error forwards 500", "gateway-error", 3, []int{500}, 500, "fail 500", 1},
		{"retriable-4xx retries 409", "retriable-4xx", 3, []int{409}, 200, "ok 0", 2},
		{"retriable-4xx forwards 408", "retriable-4xx", 3, []int{408}, 408, "fail 408", 1},
		{"retriable-4xx forwards 503", "retriable-4xx", 3, []int{503}, 503, "fail 503", 1},
		{"exhausted forwards the last answer", "5xx", 2, []int{503, 502, 500, 503}, 500, "fail 500", 3},
		{"reset alone forwards 503", "reset", 3, []int{503}, 503, "fail 503", 1},
	} {
		for _, proto := range protos {
			t.Run(proto+" "+tc.name, func(t *testing.T) {
				a := statusApp(t, tc.codes...)
				ln := listen(t)
				s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("app", tc.retryOn, tc.retries, 0, 0), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{})
				resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
				if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
				}
				if n := a.reqs.Load(); n != tc.wantTries {
					t.Errorf("app saw %d requests, want %d", n, tc.wantTries)
				}
				if got, want := s.hp.RetryStats().Retries.Load(), uint64(tc.wantTries-1); got != want {
					t.Errorf("retries counted %d, want %d", got, want)
				}
			})
		}
	}
}

// resetOnce is a scripted HTTP/1.1 upstream: its first connection is reset after
// the request head arrives; later ones answer 200 "ok". conns counts connections.
func resetOnce(t *testing.T) (netip.AddrPort, *atomic.Int64) {
	var conns atomic.Int64
	a := dt.ServeTCP(t, func(c net.Conn) {
		first := conns.Add(1) == 1
		br := bufio.NewReader(c)
		for {
			for {
				l, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(l) <= 2 {
					break
				}
			}
			if first {
				_ = c.(*net.TCPConn).SetLinger(0)
				return // closed with a reset, no response
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return a, &conns
}

func TestRetryOnResetAndConnectFailure(t *testing.T) {
	for _, proto := range protos {
		for _, tc := range []struct {
			name, retryOn string
			dead          bool // the first host picked refuses connections
			wantStatus    int
			wantConns     int64 // connections the live upstream saw
		}{
			{"reset retried", "reset", false, 200, 2},
			{"reset under 5xx", "5xx", false, 200, 2},
			{"reset under gateway-error", "gateway-error", false, 200, 2},
			{"reset not under connect-failure", "connect-failure", false, 503, 1},
			{"reset not under retriable-4xx", "retriable-4xx", false, 503, 1},
			{"connect failure retried on another host", "connect-failure", true, 200, 1},
			{"connect failure under reset", "reset", true, 200, 1},
			{"connect failure not under retriable-4xx", "retriable-4xx", true, 503, 0},
		} {
			t.Run(proto+" "+tc.name, func(t *testing.T) {
				live, conns := resetOnce(t)
				eps := []netip.AddrPort{live}
				if tc.dead {
					conns.Store(1) // no reset: the dead host is the failure
					// Round robin picks the first endpoint first.
					eps = []netip.AddrPort{deadAddr(t), live}
				}
				ln := listen(t)
				s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("app", tc.retryOn, 2, 0, 0), map[string][]netip.AddrPort{"app": eps}), sidecarOpts{})
				resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
				if resp.StatusCode != tc.wantStatus {
					t.Errorf("got %d %q, want %d", resp.StatusCode, body, tc.wantStatus)
				}
				if tc.wantStatus == 503 && resp.Header.Get(httpproxy.LocalHeader) != httpproxy.LocalUpstreamConnect {
					t.Errorf("503 from %q, want the sidecar's %s", resp.Header.Get(httpproxy.LocalHeader), httpproxy.LocalUpstreamConnect)
				}
				got := conns.Load()
				if tc.dead {
					got--
				}
				if got != tc.wantConns {
					t.Errorf("upstream saw %d connections, want %d", got, tc.wantConns)
				}
			})
		}
	}
}

// failingHealth fails the first fails Checks with code, then answers SERVING.
type failingHealth struct {
	healthpb.UnimplementedHealthServer
	code  codes.Code
	fails int64
	calls atomic.Int64
}

func (h *failingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.calls.Add(1) <= h.fails {
		return nil, status.Error(h.code, "scripted failure")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// grpc-go server and client: a trailers-only error is retried by the gRPC status
// names of retryOn, and only by its own.
func TestRetryOnGRPCStatus(t *testing.T) {
	for _, tc := range []struct {
		retryOn string
		code    codes.Code
		retried bool
	}{
		{"cancelled", codes.Canceled, true},
		{"deadline-exceeded", codes.DeadlineExceeded, true},
		{"unavailable", codes.Unavailable, true},
		{"resource-exhausted", codes.ResourceExhausted, true},
		{"unavailable", codes.ResourceExhausted, false},
		{"cancelled,deadline-exceeded,resource-exhausted", codes.Unavailable, false},
		{"5xx", codes.Unavailable, false}, // HTTP status 200: not a 5xx
		{"unavailable", codes.Internal, false},
	} {
		t.Run(tc.retryOn+" "+tc.code.String(), func(t *testing.T) {
			h := &failingHealth{code: tc.code, fails: 1}
			gln := listen(t)
			srv := grpc.NewServer()
			healthpb.RegisterHealthServer(srv, h)
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(gln) }()
			t.Cleanup(func() { srv.Stop(); <-done })

			ln := listen(t)
			res := dt.Resources{}
			res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
			res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"svc", "svc:80"}, retryRoute("grpc", tc.retryOn, 2, 0, 0))))
			res.Add(xdsresource.ClusterType, dt.EDSCluster("grpc", dt.ClusterOpts{HTTP2: true, Connect: time.Second}))
			res.Add(xdsresource.EndpointType, dt.Endpoints("grpc", addrOf(gln)))
			s := startSidecar(t, ln, res, sidecarOpts{})
			cc, err := grpc.NewClient("passthrough:///"+s.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("svc"))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			want, calls := codes.OK, int64(2)
			if !tc.retried {
				want, calls = tc.code, 1
			}
			if status.Code(err) != want {
				t.Errorf("Check: %v, want %v", err, want)
			}
			if n := h.calls.Load(); n != calls {
				t.Errorf("server saw %d calls, want %d", n, calls)
			}
		})
	}
}

// lengthless hides a reader's length, so a client streams it (chunked on
// HTTP/1.1, DATA frames without content-length on HTTP/2).
type lengthless struct{ r io.Reader }

func (l lengthless) Read(p []byte) (int, error) { return l.r.Read(p) }

// A body at the replay bound is kept and retried; one byte past it is sent once,
// its answer forwarded, and the reason counted.
func TestRetryBodyBound(t *testing.T) {
	const bound = httpproxy.MinMaxRetryBodyBytes
	for _, proto := range protos {
		for _, tc := range []struct {
			name      string
			size      int
			streamed  bool // no Content-Length
			retried   bool
			reason    int
			notCounts bool
		}{
			{"at the bound", bound, false, true, 0, true},
			{"one past the bound", bound + 1, false, false, httpproxy.NotBufferedTooLarge, false},
			{"streamed at the bound", bound, true, true, 0, true},
			{"streamed one past the bound", bound + 1, true, false, httpproxy.NotBufferedTooLarge, false},
		} {
			t.Run(proto+" "+tc.name, func(t *testing.T) {
				a := statusApp(t, 503)
				ln := listen(t)
				s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("app", "5xx", 2, 0, 0), map[string][]netip.AddrPort{"app": {a.ap()}}),
					sidecarOpts{proxy: func(c *httpproxy.Config) { c.MaxRetryBodyBytes = bound }})
				var body io.Reader = strings.NewReader(strings.Repeat("b", tc.size))
				if tc.streamed {
					body = lengthless{body}
				}
				req, err := http.NewRequest("POST", "http://"+s.Addr.String()+"/", body)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = "svc"
				resp, err := clientFor(t, proto).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantStatus, wantBody, wantReqs := 503, "fail 503", int64(1)
				if tc.retried {
					wantStatus, wantBody, wantReqs = 200, fmt.Sprintf("ok %d", tc.size), 2
				}
				if resp.StatusCode != wantStatus || string(got) != wantBody {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, wantStatus, wantBody)
				}
				if n := a.reqs.Load(); n != wantReqs {
					t.Errorf("app saw %d requests, want %d", n, wantReqs)
				}
				st := s.hp.RetryStats()
				var total uint64
				for i := range httpproxy.NotBufferedReasons {
					total += st.BodyNotBuffered[i].Load()
				}
				switch {
				case tc.notCounts && total != 0:
					t.Errorf("counted %d bodies not kept, want none", total)
				case !tc.notCounts && (total != 1 || st.BodyNotBuffered[tc.reason].Load() != 1):
					t.Errorf("not-kept counts %d in all, %d for %q; want 1 for it", total, st.BodyNotBuffered[tc.reason].Load(), httpproxy.NotBufferedReasons[tc.reason])
				}
			})
		}
	}
}

// Every retry goes to a host not yet tried while there is one.
func TestRetryNeverRepeatsHost(t *testing.T) {
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			apps := []*app{statusApp(t, 503, 503, 503, 503, 503), statusApp(t, 503, 503, 503, 503, 503), statusApp(t, 503, 503, 503, 503, 503)}
			var eps []netip.AddrPort
			for _, a := range apps {
				eps = append(eps, a.ap())
			}
			ln := listen(t)
			s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("app", "5xx", 2, 0, 0), map[string][]netip.AddrPort{"app": eps}), sidecarOpts{})
			c := clientFor(t, proto)
			for i := range 5 {
				resp, _ := do(t, c, "GET", "http://"+s.Addr.String()+"/", "svc", "")
				if resp.StatusCode != 503 {
					t.Fatalf("request %d: %d, want the last 503", i, resp.StatusCode)
				}
				for j, a := range apps {
					if n := a.reqs.Load(); n != int64(i+1) {
						t.Fatalf("after request %d: host %d saw %d requests, want %d (one per request)", i, j, n, i+1)
					}
				}
			}
		})
	}
}

// When the route's destinations fail, the fallbacks are tried in order; the
// answer names the priority that gave it.
func TestFallbackOrderAndPriority(t *testing.T) {
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			fb1 := statusApp(t, 503, 503, 503)
			fb2 := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fb2") })
			primary := startApp(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "primary") })
			eps := map[string][]netip.AddrPort{"dead": {deadAddr(t)}, "fb1": {fb1.ap()}, "fb2": {fb2.ap()}, "primary": {primary.ap()}}
			for _, rc := range []struct {
				name     string
				route    *routev3.Route
				body     string
				priority string // "" : no header
				fb1Reqs  int64
			}{
				{"primary answers", withFallback(dt.PrefixRoute("/", "primary", 0), "fb1", "fb2"), "primary", "0", 0},
				{"second fallback answers", withFallback(dt.PrefixRoute("/", "dead", 0), "fb1", "fb2"), "fb2", "2", 1},
				{"first fallback on connect failure", withFallback(dt.PrefixRoute("/", "dead", 0), "fb2", "fb1"), "fb2", "1", 0},
				{"retries then fallback", withFallback(retryRoute("fb1", "5xx", 1, 0, 0), "fb2"), "fb2", "1", 2},
				{"no fallbacks, no header", dt.PrefixRoute("/", "primary", 0), "primary", "", 0},
			} {
				t.Run(rc.name, func(t *testing.T) {
					before := fb1.reqs.Load()
					ln := listen(t)
					s := startSidecar(t, ln, oneRoute(addrOf(ln), rc.route, eps), sidecarOpts{})
					resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
					if resp.StatusCode != 200 || body != rc.body {
						t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, rc.body)
					}
					if got, ok := resp.Header[http.CanonicalHeaderKey(httpproxy.PriorityHeader)]; rc.priority == "" && ok || rc.priority != "" && (len(got) != 1 || got[0] != rc.priority) {
						t.Errorf("%s = %q, want %q", httpproxy.PriorityHeader, got, rc.priority)
					}
					if n := fb1.reqs.Load() - before; n != rc.fb1Reqs {
						t.Errorf("fb1 saw %d requests, want %d", n, rc.fb1Reqs)
					}
					st := s.hp.RetryStats()
					for prio := 1; prio < len(st.FallbackAnswered); prio++ {
						want := uint64(0)
						if rc.priority == fmt.Sprint(prio) {
							want = 1
						}
						if got := st.FallbackAnswered[prio].Load(); got != want {
							t.Errorf("answers counted for priority %d: %d, want %d", prio, got, want)
						}
					}
				})
			}
		})
	}
}

// The route timeout bounds every try and back-off together; a retry whose
// back-off would pass it is not made and the answer in hand is forwarded.
func TestRouteTimeoutBoundsRetries(t *testing.T) {
	slow := startApp(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	for _, proto := range protos {
		t.Run(proto+" per-try timeouts", func(t *testing.T) {
			before := slow.reqs.Load()
			ln := listen(t)
			s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("slow", "5xx", 10, 300*time.Millisecond, 100*time.Millisecond),
				map[string][]netip.AddrPort{"slow": {slow.ap()}}), sidecarOpts{})
			start := time.Now()
			resp, _ := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			took := time.Since(start)
			if resp.StatusCode != 504 || resp.Header.Get(httpproxy.TimeoutHeader) != "route=300ms" {
				t.Errorf("got %d %s=%q, want 504 route=300ms", resp.StatusCode, httpproxy.TimeoutHeader, resp.Header.Get(httpproxy.TimeoutHeader))
			}
			// 11 tries of 100ms would take over a second.
			if took < 300*time.Millisecond || took > 900*time.Millisecond {
				t.Errorf("answered after %v, want about the route timeout (300ms)", took)
			}
			if n := slow.reqs.Load() - before; n < 2 || n > 3 {
				t.Errorf("upstream saw %d tries, want 2 or 3 in 300ms of 100ms tries", n)
			}
		})
		t.Run(proto+" per-try timeouts exhausted", func(t *testing.T) {
			before := slow.reqs.Load()
			ln := listen(t)
			s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("slow", "5xx", 1, 0, 100*time.Millisecond),
				map[string][]netip.AddrPort{"slow": {slow.ap()}}), sidecarOpts{})
			start := time.Now()
			resp, _ := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			if resp.StatusCode != 504 || resp.Header.Get(httpproxy.TimeoutHeader) != "per-try=100ms" {
				t.Errorf("got %d %s=%q, want 504 per-try=100ms", resp.StatusCode, httpproxy.TimeoutHeader, resp.Header.Get(httpproxy.TimeoutHeader))
			}
			if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
				t.Errorf("answered after %v, want two tries of 100ms and a back-off", took)
			}
			if n := slow.reqs.Load() - before; n != 2 {
				t.Errorf("upstream saw %d tries, want 2", n)
			}
		})
		t.Run(proto+" back-off past the route timeout", func(t *testing.T) {
			a := statusApp(t, 503)
			r := retryRoute("app", "5xx", 3, 400*time.Millisecond, 0)
			// The first back-off is below 1h: nearly always past 400ms.
			r.GetRoute().RetryPolicy.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Hour)}
			ln := listen(t)
			s := startSidecar(t, ln, oneRoute(addrOf(ln), r, map[string][]netip.AddrPort{"app": {a.ap()}}),
				sidecarOpts{proxy: func(c *httpproxy.Config) { c.Rand = func() uint64 { return uint64(time.Hour) - 1 } }})
			start := time.Now()
			resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			if resp.StatusCode != 503 || body != "fail 503" {
				t.Errorf("got %d %q, want the upstream's 503", resp.StatusCode, body)
			}
			if took := time.Since(start); took > 300*time.Millisecond {
				t.Errorf("answered after %v: it waited for a retry that could not fit", took)
			}
			if n := a.reqs.Load(); n != 1 {
				t.Errorf("app saw %d requests, want 1", n)
			}
			if n := s.hp.RetryStats().RetriesNoTime.Load(); n != 1 {
				t.Errorf("retries not made for time: %d, want 1", n)
			}
		})
	}
}

// The breaker's retry limit (maxRetries) bounds retries: at 0 none is made, the
// failed answer is forwarded and the refusal counted.
func TestRetriesNeedABreakerToken(t *testing.T) {
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			a := statusApp(t, 503)
			s := retry5xxSidecar(t, a.ap(), 0, []string{"svc", "svc:80"}...)
			resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			if resp.StatusCode != 503 || body != "fail 503" {
				t.Errorf("got %d %q, want the upstream's 503", resp.StatusCode, body)
			}
			if n := a.reqs.Load(); n != 1 {
				t.Errorf("app saw %d requests, want 1", n)
			}
			if n := s.hp.RetryStats().RetriesRefused.Load(); n != 1 {
				t.Errorf("retries refused: %d, want 1", n)
			}
		})
	}
}

// An HTTP/1.1 body behind Expect: 100-continue is not kept (the upstream is asked
// before the client sends it): sent once, not retried, the reason counted.
func TestRetryBodyExpectContinueNotKept(t *testing.T) {
	a := statusApp(t, 503)
	ln := listen(t)
	s := startSidecar(t, ln, oneRoute(addrOf(ln), retryRoute("app", "5xx", 2, 0, 0), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{})
	c, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: svc\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("first answer %v %v, want 100 Continue", resp, err)
	}
	if _, err := io.WriteString(c, "abc"); err != nil {
		t.Fatal(err)
	}
	if resp, err = http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || string(body) != "fail 503" {
		t.Errorf("got %d %q, want the upstream's 503", resp.StatusCode, body)
	}
	if n := a.reqs.Load(); n != 1 {
		t.Errorf("app saw %d requests, want 1", n)
	}
	if n := s.hp.RetryStats().BodyNotBuffered[httpproxy.NotBufferedExpect].Load(); n != 1 {
		t.Errorf("expect-continue bodies not kept: %d, want 1", n)
	}
}

// A retry holds its maxRetries token until its attempt ends: with maxRetries 1,
// while one request's retry is at the upstream another request's retry is refused.
func TestRetryTokenHeldThroughItsAttempt(t *testing.T) {
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			release := make(chan struct{})
			var n atomic.Int64
			a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
				switch n.Add(1) {
				case 1, 3: // A's first try, B's first try
					w.WriteHeader(503)
				case 2: // A's retry: held at the upstream
					<-release
					io.WriteString(w, "A")
				default:
					io.WriteString(w, "late")
				}
			})
			s := retry5xxSidecar(t, a.ap(), 1, []string{"*"}...)
			url := "http://" + s.Addr.String() + "/"
			first := getAsync(clientFor(t, proto), url)
			testkit.Eventually(t, 5*time.Second, "A's retry at the upstream", func() bool { return n.Load() == 2 })
			req, _ := http.NewRequest("GET", url, nil)
			req.Host = "svc"
			resp, err := clientFor(t, proto).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("B: %d, want its 503 forwarded (no token for its retry)", resp.StatusCode)
			}
			if got := s.hp.RetryStats().RetriesRefused.Load(); got != 1 {
				t.Errorf("retries refused %d, want 1", got)
			}
			close(release)
			if r := <-first; r.err != nil || r.code != 200 {
				t.Errorf("A: %+v, want 200 from its retry", r)
			}
		})
	}
}

// badHealth fails every Check with UNAVAILABLE (a trailers-only answer) and ends
// every Watch, after a message, with INTERNAL in the trailers.
type badHealth struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func (h *badHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "down")
}

func (h *badHealth) Watch(_ *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.calls.Add(1)
	if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	return status.Error(codes.Internal, "broke mid-stream")
}

// A gRPC host's failures reach outlier detection though every HTTP status is 200:
// the grpc-status of a trailers-only answer, and the one in the trailers at the end
// of a stream, count as 5xx (UNAVAILABLE 503, INTERNAL 500); after two
// consecutive the host is ejected and no call goes to it.
func TestGRPCStatusesReachOutlierDetection(t *testing.T) {
	for _, call := range []string{"Check (trailers-only)", "Watch (trailers)"} {
		t.Run(call, func(t *testing.T) {
			bad := &badHealth{}
			good := &healthApp{} // Check SERVING; Watch ends ABORTED (409: not a 5xx)
			var addrs []netip.AddrPort
			for _, h := range []healthpb.HealthServer{bad, good} {
				gln := listen(t)
				srv := grpc.NewServer()
				healthpb.RegisterHealthServer(srv, h)
				done := make(chan struct{})
				go func() { defer close(done); _ = srv.Serve(gln) }()
				t.Cleanup(func() { srv.Stop(); <-done })
				addrs = append(addrs, addrOf(gln))
			}
			ln := listen(t)
			cl := dt.EDSCluster("grpc", dt.ClusterOpts{HTTP2: true, Connect: time.Second})
			cl.OutlierDetection = &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(2), EnforcingConsecutive_5Xx: wrapperspb.UInt32(100),
				BaseEjectionTime: durationpb.New(time.Hour), MaxEjectionPercent: wrapperspb.UInt32(50)}
			res := dt.Resources{}
			res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
			res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", []string{"svc", "svc:80"}, dt.PrefixRoute("/", "grpc", 0))))
			res.Add(xdsresource.ClusterType, cl)
			res.Add(xdsresource.EndpointType, dt.Endpoints("grpc", addrs...)) // round robin: bad first
			s := startSidecar(t, ln, res, sidecarOpts{})
			cc, err := grpc.NewClient("passthrough:///"+s.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("svc"))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if call == "Check (trailers-only)" {
					_, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{})
				} else if st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
					for {
						if _, err := st.Recv(); err != nil {
							break
						}
					}
				}
				cancel()
			}
			if n := bad.calls.Load(); n != 2 {
				t.Errorf("failing host got %d calls, want 2 (ejected after its second failure)", n)
			}
		})
	}
}

// A request holds at most one retry token (as Envoy, the token of a retry is given
// back when its outcome is judged): with maxRetries 1 one request still makes all
// its retries in turn.
func TestSequentialRetriesNeedOneToken(t *testing.T) {
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			a := statusApp(t, 503, 502, 503)
			s := retry5xxSidecar(t, a.ap(), 1, []string{"svc", "svc:80"}...)
			resp, body := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			if resp.StatusCode != 200 || body != "ok 0" {
				t.Errorf("got %d %q, want 200 after three retries", resp.StatusCode, body)
			}
			if st := s.hp.RetryStats(); st.Retries.Load() != 3 || st.RetriesRefused.Load() != 0 {
				t.Errorf("retries %d, refused %d; want 3 and 0", st.Retries.Load(), st.RetriesRefused.Load())
			}
			// The last token is given back once the answer is written: soon after
			// the client has it.
			b := s.snap.Load().Cluster("app").Breaker
			testkit.Eventually(t, 5*time.Second, "no retry token held", func() bool { return b.InUse(circuitbreak.Retries) == 0 })
		})
	}
}

// The sidecar's x-weft-priority replaces one the upstream sent.
func TestPriorityHeaderIsTheSidecars(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(httpproxy.PriorityHeader, "7")
		io.WriteString(w, "ok")
	})
	for _, proto := range protos {
		t.Run(proto, func(t *testing.T) {
			ln := listen(t)
			s := startSidecar(t, ln, oneRoute(addrOf(ln), withFallback(dt.PrefixRoute("/", "app", 0), "app"), map[string][]netip.AddrPort{"app": {a.ap()}}), sidecarOpts{})
			resp, _ := do(t, clientFor(t, proto), "GET", "http://"+s.Addr.String()+"/", "svc", "")
			if got := resp.Header[http.CanonicalHeaderKey(httpproxy.PriorityHeader)]; len(got) != 1 || got[0] != "0" {
				t.Errorf("%s = %q, want [0]", httpproxy.PriorityHeader, got)
			}
		})
	}
}

// retry5xxSidecar is a sidecar whose route for domains retries 5xx three times to
// app, a cluster with maxConnections 100 and maxRetries maxRetries: the setting
// of the tests of retry tokens.
func retry5xxSidecar(t *testing.T, app netip.AddrPort, maxRetries uint32, domains ...string) *sidecar {
	t.Helper()
	ln := listen(t)
	c := dt.EDSCluster("app", dt.ClusterOpts{Connect: time.Second, MaxConns: 100})
	c.CircuitBreakers.Thresholds[0].MaxRetries = wrapperspb.UInt32(maxRetries)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.HTTPListener("outbound", addrOf(ln), "routes"))
	res.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("svc", domains, retryRoute("app", "5xx", 3, 0, 0))))
	res.Add(xdsresource.ClusterType, c)
	res.Add(xdsresource.EndpointType, dt.Endpoints("app", app))
	return startSidecar(t, ln, res, sidecarOpts{})
}
