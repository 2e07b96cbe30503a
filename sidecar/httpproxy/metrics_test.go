package httpproxy_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weft-mesh/weft/sidecar/admin"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

// metricsServer serves m on /metrics the way the sidecar's admin does.
func metricsServer(t *testing.T, m *admin.RequestMetrics) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// waitMetrics polls url until every wanted line is in the exposition; the proxy
// records a request after its response is written, so a client can be first.
func waitMetrics(t *testing.T, url string, want []string) {
	t.Helper()
	testkit.Wait(t, 5*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			lines[l] = true
		}
		var missing []string
		for _, w := range want {
			if !lines[w] {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("/metrics lacks %q; got:\n%s", missing, b)
		}
		return nil
	})
}

// TestRequestMetricsThroughProxy sends requests through a real proxy on every
// answer path and checks the series /metrics shows.
func TestRequestMetricsThroughProxy(t *testing.T) {
	a := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
		io.WriteString(w, "ok")
	})
	m, err := admin.NewRequestMetrics(admin.RequestMetricsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var degraded atomic.Bool
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{
		observer: m,
		degraded: func() (string, bool) { return "test", degraded.Load() },
	})
	base := "http://" + s.Addr.String()
	h1, h2 := client(t), h2cClient(t)
	for _, tc := range []struct {
		c    *http.Client
		path string
		code int
	}{
		{h1, "/ok", 200}, {h1, "/ok", 200}, {h1, "/teapot", 418}, // HTTP/1.1 fast path
		{h2, "/ok", 200}, {h2, "/teapot", 418}, // HTTP/2 path
	} {
		if resp, _ := do(t, tc.c, "GET", base+tc.path, "svc", ""); resp.StatusCode != tc.code {
			t.Fatalf("GET %s: status %d, want %d", tc.path, resp.StatusCode, tc.code)
		}
	}
	degraded.Store(true)
	for _, c := range []*http.Client{h1, h2} {
		if resp, _ := do(t, c, "GET", base+"/ok", "svc", ""); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("degraded: status %d, want 503", resp.StatusCode)
		}
	}
	// A malformed request is answered 400 before any routing.
	raw, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := io.WriteString(raw, "GET / HTTP/1.1\r\nno colon here\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(raw); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("malformed request: %q, %v", b, err)
	}
	waitMetrics(t, metricsServer(t, m), []string{
		`weft_sidecar_requests_total{cluster="backend",code="200"} 3`,
		`weft_sidecar_requests_total{cluster="backend",code="418"} 2`,
		`weft_sidecar_requests_total{cluster="none",code="503"} 2`,
		`weft_sidecar_requests_total{cluster="none",code="400"} 1`,
		`weft_sidecar_request_duration_seconds_count{cluster="backend"} 5`,
		`weft_sidecar_request_duration_seconds_count{cluster="none"} 3`,
	})
}

// TestTCPMetricsThroughProxy checks a proxied TCP connection's count and bytes.
func TestTCPMetricsThroughProxy(t *testing.T) {
	echoAddr := dt.ServeTCP(t, dt.Echo)
	m, err := admin.NewRequestMetrics(admin.RequestMetricsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	res := dt.Resources{}
	res.Add(xdsresource.ListenerType, dt.Listener("tcp", addrOf(ln), dt.TCPChain(0, "db")))
	res.Add(xdsresource.ClusterType, dt.EDSCluster("db", dt.ClusterOpts{}))
	res.Add(xdsresource.EndpointType, dt.Endpoints("db", echoAddr))
	s := startSidecar(t, ln, res, sidecarOpts{name: "tcp", tcpObs: m})
	c, err := net.Dial("tcp", s.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := strings.Repeat("x", 1000)
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if len(got) != len(msg) {
		t.Fatalf("echo: %d bytes, want %d", len(got), len(msg))
	}
	waitMetrics(t, metricsServer(t, m), []string{
		`weft_sidecar_tcp_connections_total{cluster="db"} 1`,
		`weft_sidecar_tcp_received_bytes_total{cluster="db"} 1000`,
		`weft_sidecar_tcp_sent_bytes_total{cluster="db"} 1000`,
	})
}
