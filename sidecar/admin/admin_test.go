package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type fakeRuntime struct{ d atomic.Pointer[runtime.Dump] }

func (f *fakeRuntime) Dump() *runtime.Dump { return f.d.Load() }
func (f *fakeRuntime) Ready() (bool, string) {
	d := f.d.Load()
	if !d.Ready {
		return false, d.Reason
	}
	return true, "ready"
}

func activeDump() *runtime.Dump {
	m := &runtime.ManifestInfo{Revision: 9, IssuedAt: t0, ValidUntil: t0.Add(24 * time.Hour), KeyID: "abcd", Resources: 4}
	return &runtime.Dump{NodeID: "n1", Ready: true,
		Active:        &runtime.ActiveInfo{Source: runtime.SourceXDS, ActivatedAt: t0, Digest: "d", Revision: 9, Versions: map[string]string{xdsclient.TypeCluster: "v9"}, Manifest: m},
		LastConfirmed: t0,
		Staleness:     []runtime.ClassState{{Class: "routes", Level: "WARN", Age: "6m0s", AgeSeconds: 360, Reason: "routes: age 6m0s reached warnAfter 5m0s"}},
		LastKnownGood: runtime.LKGInfo{Path: "/state/last-known-good.json", SavedAt: t0},
		Counters:      runtime.Counters{Activations: 2, Rejected: 1}}
}

func newAdmin(t *testing.T, rt Runtime) *Admin {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "weft_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: rt, Gatherer: reg, XDS: func() *xdsclient.Status {
		return &xdsclient.Status{Mode: xdsclient.Delta, Server: "127.0.0.1:15010", Connected: true, Types: []xdsclient.TypeStatus{
			{TypeURL: xdsclient.TypeCluster, Version: "v9", Nonce: "7", ACKs: 3, NACKs: 1, LastError: "cluster \"x\": bad", Resources: 2},
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestConfigDump(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(activeDump())
	code, body := get(t, newAdmin(t, rt).Handler(), "/config_dump")
	if code != 200 {
		t.Fatalf("code %d", code)
	}
	var cd ConfigDump
	if err := json.Unmarshal([]byte(body), &cd); err != nil {
		t.Fatal(err)
	}
	if cd.Revision != 9 || cd.Manifest == nil || cd.Manifest.KeyID != "abcd" || !cd.Manifest.ValidUntil.Equal(t0.Add(24*time.Hour)) {
		t.Errorf("revision/manifest = %d %+v", cd.Revision, cd.Manifest)
	}
	if len(cd.Staleness) != 1 || cd.Staleness[0].AgeSeconds != 360 || cd.LastKnownGood.Path != "/state/last-known-good.json" {
		t.Errorf("staleness/lkg = %+v %+v", cd.Staleness, cd.LastKnownGood)
	}
	if cd.XDS == nil || len(cd.XDS.Types) != 1 || cd.XDS.Types[0].Type != "Cluster" || cd.XDS.Types[0].Nonce != "7" || cd.XDS.Types[0].LastError != "cluster \"x\": bad" {
		t.Errorf("xds = %+v", cd.XDS)
	}
}

// TestConfigDumpInterception: the mode chosen at start, and nothing when unset.
func TestConfigDumpInterception(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(activeDump())
	if _, body := get(t, newAdmin(t, rt).Handler(), "/config_dump"); strings.Contains(body, `"interception"`) {
		t.Errorf("config_dump without Interception shows one:\n%s", body)
	}
	a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: rt, Gatherer: prometheus.NewRegistry(),
		Interception: &Interception{Mode: "iptables", Reason: "auto: eBPF unavailable, iptables rules assumed: x"}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, a.Handler(), "/config_dump")
	if want := `"interception": {
    "mode": "iptables",
    "reason": "auto: eBPF unavailable, iptables rules assumed: x"
  }`; !strings.Contains(body, want) {
		t.Errorf("config_dump lacks\n%s\nin\n%s", want, body)
	}
}

func TestStatsAndMetrics(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(activeDump())
	h := newAdmin(t, rt).Handler()
	code, body := get(t, h, "/stats")
	for _, want := range []string{"runtime.activations: 2\n", "runtime.activation_refused: 1\n", "runtime.ready: 1\n", "runtime.revision: 9\n",
		"staleness.routes.age_seconds: 360.000\n", "staleness.routes.level: WARN\n", "xds.Cluster.nacks: 1\n", "xds.Cluster.version: v9\n", "xds.connected: 1\n"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/stats lacks %q:\n%s", want, body)
		}
	}
	code, body = get(t, h, "/metrics")
	if code != 200 || !strings.Contains(body, "weft_test_total 3") {
		t.Errorf("/metrics = %d\n%s", code, body)
	}
	if code, _ := get(t, h, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope = %d", code)
	}
}

func TestReadiness(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(&runtime.Dump{Reason: "no configuration yet: waiting for pilot", Staleness: []runtime.ClassState{}})
	a := newAdmin(t, rt)
	tests := []struct {
		dump *runtime.Dump
		code int
		body string
	}{
		{&runtime.Dump{Reason: "no configuration yet: waiting for pilot"}, 503, "no configuration yet: waiting for pilot\n"},
		{&runtime.Dump{Reason: "last-known-good refused (node check failed): x"}, 503, "last-known-good refused (node check failed): x\n"},
		{activeDump(), 200, "ready\n"},
	}
	for _, tc := range tests {
		rt.d.Store(tc.dump)
		code, body := get(t, a.ReadyHandler(), "/healthz/ready")
		if code != tc.code || body != tc.body {
			t.Errorf("ready = %d %q, want %d %q", code, body, tc.code, tc.body)
		}
	}
}

func TestNewChecksConfig(t *testing.T) {
	rt := &fakeRuntime{}
	reg := prometheus.NewRegistry()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Runtime: rt, Gatherer: reg}, "admin: invalid config: Logger required"},
		{Config{Logger: hclog.NewNullLogger(), Gatherer: reg}, "admin: invalid config: Runtime required"},
		{Config{Logger: hclog.NewNullLogger(), Runtime: rt}, "admin: invalid config: Gatherer required"},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg); err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
			t.Errorf("New = %v, want %q", err, tc.want)
		}
	}
}

func TestServeShutsDown(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(activeDump())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, newAdmin(t, rt).ReadyHandler(), hclog.NewNullLogger()) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz/ready")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ready\n" {
		t.Fatalf("ready = %d %q", resp.StatusCode, b)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(ShutdownTimeout + time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestXDSCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	status := &xdsclient.Status{Connected: true, UnknownTypeResponses: 2, Types: []xdsclient.TypeStatus{
		{TypeURL: xdsclient.TypeCluster, ACKs: 3, NACKs: 1, Ignored: 4, Resources: 5}}}
	var cur atomic.Pointer[xdsclient.Status]
	reg.MustRegister(NewXDSCollector(cur.Load))
	a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: &fakeRuntime{}, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, a.Handler(), "/metrics"); strings.Contains(body, "weft_sidecar_xds") {
		t.Fatalf("series before the client exists:\n%s", body)
	}
	cur.Store(status)
	_, body := get(t, a.Handler(), "/metrics")
	for _, want := range []string{`weft_sidecar_xds_acks_total{type="Cluster"} 3`, `weft_sidecar_xds_nacks_total{type="Cluster"} 1`,
		`weft_sidecar_xds_ignored_total{type="Cluster"} 4`, `weft_sidecar_xds_resources{type="Cluster"} 5`,
		"weft_sidecar_xds_connected 1", "weft_sidecar_xds_unknown_type_responses_total 2"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Without the build tag, the profiler is not linked in: New refuses Pprof.
func TestPprofNeedsBuildTag(t *testing.T) {
	_, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: &fakeRuntime{}, Gatherer: prometheus.NewRegistry(), Pprof: true})
	if pprofBuilt {
		if err != nil {
			t.Fatalf("built with %s: New(Pprof) = %v", PprofTag, err)
		}
		return
	}
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "-tags "+PprofTag) {
		t.Fatalf("New(Pprof) without %s = %v", PprofTag, err)
	}
}
