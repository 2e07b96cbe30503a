package httpproxy_test

import (
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/tools/testkit"
)

// protocols are the two client protocols every bound is checked over.
var protocols = []struct {
	name   string
	client func(*testing.T) *http.Client
}{{"http1", client}, {"h2c", h2cClient}}

// holdApp answers /hold only once release is closed (or the request is
// cancelled), everything else at once; holding counts handlers still running.
type holdApp struct {
	*app
	release chan struct{}
	holding atomic.Int64
}

func startHoldApp(t *testing.T) *holdApp {
	h := &holdApp{release: make(chan struct{})}
	h.app = startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			h.holding.Add(1)
			defer h.holding.Add(-1)
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("ok"))
	})
	return h
}

// The listener's MaxRequests admits exactly its bound of concurrent requests;
// the next one is answered 503 x-weft-overflow: requests without reaching the
// app, and a slot freed is usable again.
func TestMaxRequestsAtBoundAndOnePast(t *testing.T) {
	const bound = 3
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			a := startHoldApp(t)
			ln := listen(t)
			s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{maxRequests: bound})
			c := p.client(t)
			url := "http://" + s.Addr.String()
			var wg sync.WaitGroup
			for range bound {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, body := do(t, c, "GET", url+"/hold", "svc", "")
					if resp.StatusCode != 200 || body != "ok" {
						t.Errorf("held request: %d %q", resp.StatusCode, body)
					}
				}()
			}
			testkit.Eventually(t, 5*time.Second, "the bound's requests at the app", func() bool { return a.holding.Load() == bound })
			resp, body := do(t, c, "GET", url+"/over", "svc", "")
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(httpproxy.OverflowHeader) != httpproxy.OverflowRequests {
				t.Errorf("request %d: %d %s=%q %q, want 503 %s", bound+1, resp.StatusCode, httpproxy.OverflowHeader,
					resp.Header.Get(httpproxy.OverflowHeader), body, httpproxy.OverflowRequests)
			}
			if n := a.reqs.Load(); n != bound {
				t.Errorf("app saw %d requests, want %d (the refused one must not reach it)", n, bound)
			}
			close(a.release)
			wg.Wait()
			if resp, body := do(t, c, "GET", url+"/after", "svc", ""); resp.StatusCode != 200 {
				t.Errorf("after the held requests ended: %d %q", resp.StatusCode, body)
			}
		})
	}
}

// Memory shedding starts at the high-water mark, not a byte below, and answers
// 503 x-weft-overflow: memory without reaching the app.
func TestMemoryShedsAtHighWater(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var used atomic.Uint64
			mem, err := overload.NewMemory(overload.MemoryConfig{Limit: 64 << 20, HighWater: 0.5, Read: used.Load})
			if err != nil {
				t.Fatal(err)
			}
			a := startApp(t, echo)
			ln := listen(t)
			s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{memory: mem})
			c := p.client(t)
			url := "http://" + s.Addr.String() + "/x"

			used.Store(mem.HighWater() - 1)
			mem.Sample()
			if resp, body := do(t, c, "GET", url, "svc", ""); resp.StatusCode != 200 {
				t.Fatalf("one byte below high water: %d %q", resp.StatusCode, body)
			}
			used.Store(mem.HighWater())
			mem.Sample()
			resp, body := do(t, c, "POST", url, "svc", "a body to discard")
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(httpproxy.OverflowHeader) != httpproxy.OverflowMemory {
				t.Fatalf("at high water: %d %s=%q %q, want 503 memory", resp.StatusCode, httpproxy.OverflowHeader,
					resp.Header.Get(httpproxy.OverflowHeader), body)
			}
			if a.reqs.Load() != 1 || mem.Sheds() != 1 {
				t.Fatalf("app requests %d, sheds %d; want 1 and 1", a.reqs.Load(), mem.Sheds())
			}
			used.Store(0)
			mem.Sample()
			if resp, body := do(t, c, "GET", url, "svc", ""); resp.StatusCode != 200 {
				t.Fatalf("after memory fell: %d %q", resp.StatusCode, body)
			}
		})
	}
}

// A route that sets no timeout gets the sidecar's default: the request is
// answered 504 with x-weft-timeout naming it, and the upstream request is
// cancelled (its handler returns). A route's own timeout is named as such.
func TestDefaultRouteTimeout(t *testing.T) {
	const def = 150 * time.Millisecond
	for _, p := range protocols {
		for _, tc := range []struct {
			name    string
			timeout time.Duration // for dt.PrefixRoute: < 0 leaves it unset
			want    string
			min     time.Duration
		}{
			{"default", -1, "default=" + def.String(), def},
			{"route", 250 * time.Millisecond, "route=250ms", 250 * time.Millisecond},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				a := startHoldApp(t)
				ln := listen(t)
				res := oneRoute(addrOf(ln), dt.PrefixRoute("/", "backend", tc.timeout), map[string][]netip.AddrPort{"backend": {a.ap()}})
				s := startSidecar(t, ln, res, sidecarOpts{defaultTimeout: def})
				start := time.Now()
				resp, body := do(t, p.client(t), "GET", "http://"+s.Addr.String()+"/hold", "svc", "")
				took := time.Since(start)
				if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(httpproxy.TimeoutHeader) != tc.want {
					t.Fatalf("%d %s=%q %q, want 504 %q", resp.StatusCode, httpproxy.TimeoutHeader, resp.Header.Get(httpproxy.TimeoutHeader), body, tc.want)
				}
				if took < tc.min || took > tc.min+3*time.Second {
					t.Errorf("answered after %s, want about %s", took, tc.min)
				}
				testkit.Eventually(t, 5*time.Second, "the upstream request cancelled", func() bool { return a.holding.Load() == 0 })
			})
		}
	}
}

// The default applies at compile time: unset gets it, 0 disables, negative
// means no default.
func TestCompileDefaultRouteTimeout(t *testing.T) {
	for _, tc := range []struct {
		opt, route, want time.Duration
		isDefault        bool
	}{
		{0, -1, dataplane.DefaultRouteTimeout, true},
		{time.Second, -1, time.Second, true},
		{-1, -1, 0, false},
		{time.Second, 0, 0, false},
		{time.Second, 2 * time.Second, 2 * time.Second, false},
	} {
		t.Run(strconv.Itoa(int(tc.opt))+"/"+strconv.Itoa(int(tc.route)), func(t *testing.T) {
			cfg, err := oneRoute(dt.MustAddr("127.0.0.1:1"), dt.PrefixRoute("/", "backend", tc.route),
				map[string][]netip.AddrPort{"backend": {dt.MustAddr("127.0.0.1:2")}}).Compile(dataplane.Options{DefaultRouteTimeout: tc.opt})
			if err != nil {
				t.Fatal(err)
			}
			l := cfg.Listener("outbound")
			r := l.Chain(1).HTTP.Lookup("svc").Match("/", nil)
			if r.Timeout != tc.want || r.DefaultTimeout != tc.isDefault {
				t.Fatalf("timeout %s default %v, want %s %v", r.Timeout, r.DefaultTimeout, tc.want, tc.isDefault)
			}
		})
	}
	if dataplane.DefaultRouteTimeout != 15*time.Second {
		t.Fatalf("DefaultRouteTimeout = %s, want Envoy's 15s", dataplane.DefaultRouteTimeout)
	}
}
