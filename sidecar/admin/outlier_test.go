package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

const odKey = "outbound|9080||reviews.shop.svc.cluster.local"

// ejectOne builds a three-host cluster on reg with consecutive 5xx detection and
// ejects its first host; panic is the cluster's threshold.
func ejectOne(t *testing.T, reg *cluster.Registry, panic float64) *cluster.Cluster {
	t.Helper()
	sh := reg.Shared(odKey)
	if err := sh.Outlier.Configure(&outlier.Config{Consecutive5xx: 2, EnforcingConsecutive5xx: 100, Interval: time.Second,
		BaseEjectionTime: time.Minute, MaxEjectionTime: time.Hour, MaxEjectionPercent: 100}); err != nil {
		t.Fatal(err)
	}
	var eps []*cluster.Endpoint
	for i := range 3 {
		eps = append(eps, cluster.NewEndpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 9080), 1, true))
	}
	c, err := cluster.New(cluster.Spec{Name: odKey, ConnectTimeout: time.Second, Shared: sh, Endpoints: eps, PanicThreshold: panic})
	if err != nil {
		t.Fatal(err)
	}
	reg.Retain([]*cluster.Cluster{c})
	c.Observe(eps[0], 502)
	c.Observe(eps[0], 500)
	if !eps[0].Host.Outlier.Ejected() {
		t.Fatal("not ejected")
	}
	return c
}

func TestOutlierCollector(t *testing.T) {
	if _, err := NewOutlierCollector(nil, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil registry: %v", err)
	}
	reg := cluster.NewRegistry()
	c := ejectOne(t, reg, 70)  // 2 of 3 usable: 66.7% < 70%, panic
	reg.Shared("inbound|80||") // no detection: not exported per service
	oc, err := NewOutlierCollector(reg, func() []*cluster.Cluster { return []*cluster.Cluster{c} })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pick(0); err != nil {
		t.Fatal(err)
	}
	got := gather(t, oc)
	for name, want := range map[string]float64{
		"weft_sidecar_outlier_ejections_total{detector=consecutive5xx}":          1,
		"weft_sidecar_outlier_detected_total{detector=consecutive5xx}":           1,
		"weft_sidecar_outlier_ejections_total{detector=successRate}":             0,
		"weft_sidecar_outlier_overflow_total{detector=consecutive5xx}":           0,
		"weft_sidecar_outlier_ejected_hosts{service=" + odKey + "}":              1,
		"weft_sidecar_outlier_hosts{service=" + odKey + "}":                      3,
		"weft_sidecar_outlier_panic{cluster=" + odKey + "}":                      1,
		"weft_sidecar_outlier_returns_total":                                     0,
		"weft_sidecar_outlier_not_enforced_total{detector=failurePercentage}":    0,
		"weft_sidecar_outlier_detected_total{detector=consecutiveGatewayErrors}": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got["weft_sidecar_outlier_panic_picks_total"] < 1 {
		t.Error("panic pick not counted")
	}
	if _, ok := got["weft_sidecar_outlier_ejected_hosts{service=inbound|80||}"]; ok {
		t.Error("a service without detection exported")
	}
}

// TestOutliersEndpoint: /outliers lists the ejection with its numbers in words and
// the event that made it.
func TestOutliersEndpoint(t *testing.T) {
	reg := cluster.NewRegistry()
	ejectOne(t, reg, 50)
	now := time.Now()
	a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: &fakeRuntime{}, Gatherer: prometheus.NewRegistry(), Outliers: reg,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outliers", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc Outliers
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Ejections) != 1 || len(doc.Recent) != 1 {
		t.Fatalf("%s", rec.Body.String())
	}
	e, ev := doc.Ejections[0], doc.Recent[0]
	if e.Host != "10.0.0.1:9080" || e.Service != odKey || e.Detector != "consecutive5xx" || e.Why != "2 consecutive (threshold 2)" ||
		e.Duration != "1m0s" || e.Multiplier != 1 || e.Ejections != 1 {
		t.Fatalf("ejection %+v", e)
	}
	if ev.Action != "eject" || ev.Host != e.Host || ev.Duration != "1m0s" || ev.Why != e.Why {
		t.Fatalf("event %+v", ev)
	}
	// Without a registry the document is empty, not an error.
	a, _ = New(Config{Logger: hclog.NewNullLogger(), Runtime: &fakeRuntime{}, Gatherer: prometheus.NewRegistry()})
	rec = httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outliers", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "{\"ejections\":[],\"recent\":[]}\n" {
		t.Fatalf("%d %q", rec.Code, rec.Body.String())
	}
}
