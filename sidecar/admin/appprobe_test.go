package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/tools/testkit"
)

// seen is what the app received for one probe.
type seen struct {
	path, host, ua, header, evil string
}

// probeApp is a real HTTP application on 127.0.0.1 answering code at each path
// and recording what it was sent.
type probeApp struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []seen
	hold chan struct{} // when set, /slow waits on it
	in   atomic.Int32  // requests inside /slow
}

func newProbeApp(t *testing.T, tlsApp bool) *probeApp {
	t.Helper()
	a := &probeApp{hold: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.got = append(a.got, seen{path: r.URL.RequestURI(), host: r.Host, ua: r.UserAgent(), header: r.Header.Get("X-Probe"), evil: r.Header.Get("X-Evil")})
		a.mu.Unlock()
		switch r.URL.Path {
		case "/slow":
			a.in.Add(1)
			<-a.hold
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/moved":
			http.Redirect(w, r, "http://elsewhere.test/", http.StatusFound)
		}
	})
	if tlsApp {
		a.srv = httptest.NewTLSServer(h)
	} else {
		a.srv = httptest.NewServer(h)
	}
	t.Cleanup(func() {
		select {
		case <-a.hold:
		default:
			close(a.hold)
		}
		a.srv.Close()
	})
	return a
}

func (a *probeApp) port(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (a *probeApp) last() seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got[len(a.got)-1]
}

func (a *probeApp) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// readyServer serves ReadyHandler on a real listener, as the sidecar does on 15021.
func readyServer(t *testing.T, probers probe.Probers) string {
	t.Helper()
	rt := &fakeRuntime{}
	rt.d.Store(&runtime.Dump{NodeID: "n1", Reason: "no configuration yet"})
	a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: rt, Gatherer: prometheus.NewRegistry(), AppProbers: probers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.ReadyHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func probeGet(t *testing.T, u string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestLiveAndReady(t *testing.T) {
	base := readyServer(t, nil)
	if code, body := probeGet(t, base+"/healthz/live", nil); code != http.StatusOK || body != "live\n" {
		t.Errorf("/healthz/live: %d %q", code, body)
	}
	// Live while not ready: a sidecar waiting for its first configuration is
	// alive (the kubelet must not restart it), just not ready.
	if code, _ := probeGet(t, base+"/healthz/ready", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz/ready: %d, want 503", code)
	}
	if code, _ := probeGet(t, base+"/app-health/web/livez", nil); code != http.StatusNotFound {
		t.Errorf("/app-health without probers: %d, want 404", code)
	}
}

func TestAppProbeForwarding(t *testing.T) {
	app := newProbeApp(t, false)
	tlsApp := newProbeApp(t, true)
	port, tport := app.port(t), tlsApp.port(t)
	base := readyServer(t, probe.Probers{
		probe.Key("web", probe.Liveness):  {HTTPGet: &probe.HTTPGet{Path: "/healthz?deep=1", Port: port, HTTPHeaders: []probe.Header{{Name: "X-Probe", Value: "kubelet"}, {Name: "Host", Value: "web.local"}}}},
		probe.Key("web", probe.Readiness): {HTTPGet: &probe.HTTPGet{Path: "/fail", Port: port}},
		probe.Key("web", probe.Startup):   {HTTPGet: &probe.HTTPGet{Path: "/moved", Port: port}},
		probe.Key("tls", probe.Readiness): {HTTPGet: &probe.HTTPGet{Path: "/ok", Port: tport, Scheme: "HTTPS"}},
		probe.Key("slow", probe.Liveness): {HTTPGet: &probe.HTTPGet{Path: "/slow", Port: port}, TimeoutSeconds: 1},
		probe.Key("gone", probe.Liveness): {HTTPGet: &probe.HTTPGet{Port: 1}},
	})

	// The configured probe, with its own path, query and headers; the
	// request's own query and headers are not passed on.
	code, _ := probeGet(t, base+"/app-health/web/livez?x=../../admin", map[string]string{"X-Evil": "1", "X-Probe": "attacker"})
	if code != http.StatusOK {
		t.Fatalf("livez: %d", code)
	}
	if s := app.last(); s.path != "/healthz?deep=1" || s.host != "web.local" || s.header != "kubelet" || s.evil != "" || s.ua != "weft-prober/1.0" {
		t.Errorf("the app saw %+v", s)
	}
	// The app's status is the answer: 500 stays 500, a redirect is not followed.
	if code, _ := probeGet(t, base+"/app-health/web/readyz", nil); code != http.StatusInternalServerError {
		t.Errorf("readyz: %d, want the app's 500", code)
	}
	if code, _ := probeGet(t, base+"/app-health/web/startupz", nil); code != http.StatusFound {
		t.Errorf("startupz: %d, want the app's 302", code)
	}
	if code, _ := probeGet(t, base+"/app-health/tls/readyz", nil); code != http.StatusOK {
		t.Errorf("HTTPS probe: %d", code)
	}
	// Nothing listening: 503 with the reason.
	if code, body := probeGet(t, base+"/app-health/gone/livez", nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "port 1") {
		t.Errorf("unreachable app: %d %q", code, body)
	}
	// Only configured paths.
	n := app.count()
	for _, p := range []string{"/app-health/web/other", "/app-health/web/livez/", "/app-health/nope/livez", "/app-health/"} {
		if code, _ := probeGet(t, base+p, nil); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	if app.count() != n {
		t.Error("an unconfigured path reached the app")
	}
	// The probe's timeout bounds the wait: 503 after ~1s.
	start := time.Now()
	code, body := probeGet(t, base+"/app-health/slow/livez", nil)
	if took := time.Since(start); code != http.StatusServiceUnavailable || !strings.Contains(body, "within 1s") || took > 5*time.Second {
		t.Errorf("slow app: %d %q after %v, want 503 within the 1s timeout", code, body, took)
	}
}

// TestAppProbesInFlight: MaxAppProbesInFlight probes may wait on the app at
// once; one more is answered 503 at once, without reaching the app.
func TestAppProbesInFlight(t *testing.T) {
	app := newProbeApp(t, false)
	base := readyServer(t, probe.Probers{probe.Key("slow", probe.Liveness): {HTTPGet: &probe.HTTPGet{Path: "/slow", Port: app.port(t)}, TimeoutSeconds: 20}})
	var wg sync.WaitGroup
	codes := make(chan int, MaxAppProbesInFlight)
	for range MaxAppProbesInFlight {
		wg.Go(func() {
			resp, err := http.Get(base + "/app-health/slow/livez")
			if err != nil {
				codes <- -1
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	testkit.Eventually(t, 10*time.Second, "every slot's probe waiting in the app", func() bool { return app.in.Load() == MaxAppProbesInFlight })
	code, body := probeGet(t, base+"/app-health/slow/livez", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "too many probes in flight") {
		t.Errorf("probe past the bound: %d %q", code, body)
	}
	if got := app.in.Load(); got != MaxAppProbesInFlight {
		t.Errorf("%d requests reached the app, want %d", got, MaxAppProbesInFlight)
	}
	close(app.hold)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a probe within the bound answered %d", c)
		}
	}
}

func TestAppProbersChecked(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(&runtime.Dump{})
	_, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: rt, Gatherer: prometheus.NewRegistry(),
		AppProbers: probe.Probers{"/elsewhere": {HTTPGet: &probe.HTTPGet{Port: 80}}}})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `key "/elsewhere"`) {
		t.Fatalf("New with a bad prober: %v", err)
	}
}
