package admin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestRequestMetricsConfig(t *testing.T) {
	for _, tc := range []struct {
		max int
		ok  bool
	}{{0, true}, {1, true}, {MaxClusterLimit, true}, {-1, false}, {MaxClusterLimit + 1, false}} {
		_, err := NewRequestMetrics(RequestMetricsConfig{MaxClusters: tc.max})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("MaxClusters %d: err %v, want ok=%v (ErrConfig)", tc.max, err, tc.ok)
		}
	}
}

// TestRequestMetricsSeries checks labels: exact codes, code 0 and out-of-range
// codes, the local label, and clusters beyond the cap folded into "other".
func TestRequestMetricsSeries(t *testing.T) {
	m, err := NewRequestMetrics(RequestMetricsConfig{MaxClusters: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		cluster string
		code    int
		dur     time.Duration
	}{
		{"a", 200, time.Millisecond}, {"a", 200, 3 * time.Second}, {"a", 503, 0},
		{"b", 101, 0}, {"b", 0, 0}, {"b", 999, 0},
		{"", 404, 0},
		{"c", 200, 0}, {"d", 500, 0}, // beyond the cap of 2
	} {
		m.Request(r.cluster, r.code, r.dur)
	}
	m.TCPConn("a", 10, 20)
	m.TCPConn("a", 1, -5) // a negative count is ignored, not subtracted
	want := `
# HELP weft_sidecar_requests_total HTTP requests answered, by cluster and exact status code.
# TYPE weft_sidecar_requests_total counter
weft_sidecar_requests_total{cluster="a",code="200"} 2
weft_sidecar_requests_total{cluster="a",code="503"} 1
weft_sidecar_requests_total{cluster="b",code="0"} 1
weft_sidecar_requests_total{cluster="b",code="101"} 1
weft_sidecar_requests_total{cluster="b",code="other"} 1
weft_sidecar_requests_total{cluster="none",code="404"} 1
weft_sidecar_requests_total{cluster="other",code="200"} 1
weft_sidecar_requests_total{cluster="other",code="500"} 1
# HELP weft_sidecar_tcp_connections_total TCP proxy connections finished, by cluster.
# TYPE weft_sidecar_tcp_connections_total counter
weft_sidecar_tcp_connections_total{cluster="a"} 2
# HELP weft_sidecar_tcp_received_bytes_total Bytes received from downstream clients on TCP proxy connections, by cluster.
# TYPE weft_sidecar_tcp_received_bytes_total counter
weft_sidecar_tcp_received_bytes_total{cluster="a"} 11
# HELP weft_sidecar_tcp_sent_bytes_total Bytes sent to downstream clients on TCP proxy connections, by cluster.
# TYPE weft_sidecar_tcp_sent_bytes_total counter
weft_sidecar_tcp_sent_bytes_total{cluster="a"} 20
`
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if !strings.Contains(l, "weft_sidecar_request_duration_seconds") {
			got = append(got, l)
		}
	}
	if g := strings.Join(got, "\n"); strings.TrimSpace(g) != strings.TrimSpace(want) {
		t.Errorf("/metrics:\n%s\nwant:\n%s", g, want)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weft_sidecar_request_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if mt.GetLabel()[0].GetValue() != "a" {
				continue
			}
			h := mt.GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() != 3.001 {
				t.Errorf("cluster a histogram: count %d sum %v, want 3 and 3.001", h.GetSampleCount(), h.GetSampleSum())
			}
			for _, b := range h.GetBucket() {
				// 0 and 1ms are <= 1ms; 3s is in the 5s bucket.
				var want uint64
				switch ub := b.GetUpperBound(); {
				case ub >= 5:
					want = 3
				case ub >= .001:
					want = 2
				default:
					want = 1
				}
				if b.GetCumulativeCount() != want {
					t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
			}
		}
	}
	lines := map[string]string{}
	m.statsLines(lines)
	for k, v := range map[string]string{
		"cluster.a.rq_200": "2", "cluster.a.rq_503": "1", "cluster.a.rq_total": "3",
		"cluster.none.rq_404": "1", "cluster.other.rq_total": "2",
		"cluster.a.tcp_cx_total": "2", "cluster.a.tcp_rx_bytes": "11", "cluster.a.tcp_tx_bytes": "20",
	} {
		if lines[k] != v {
			t.Errorf("/stats %s = %q, want %q", k, lines[k], v)
		}
	}
}

// TestRequestMetricsNoAlloc: recording must not allocate once a cluster and its
// code class have been seen (the HTTP/1.1 path is allocation-free).
func TestRequestMetricsNoAlloc(t *testing.T) {
	m, err := NewRequestMetrics(RequestMetricsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m.Request("backend", 200, time.Millisecond)
	if n := testing.AllocsPerRun(1000, func() {
		m.Request("backend", 200, time.Millisecond)
		m.Request("", 404, time.Millisecond)
		m.TCPConn("backend", 1, 1)
	}); n != 0 {
		t.Errorf("%v allocations per run, want 0", n)
	}
}

// BenchmarkRequestMetrics is the per-request cost of recording.
func BenchmarkRequestMetrics(b *testing.B) {
	m, err := NewRequestMetrics(RequestMetricsConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 50 {
		m.Request("outbound|80||svc"+string(rune('a'+i%26))+".ns.svc.cluster.local", 200, 0)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request("outbound|80||svcq.ns.svc.cluster.local", 200, 2*time.Millisecond)
		}
	})
}
