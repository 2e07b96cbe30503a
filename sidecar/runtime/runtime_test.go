package runtime

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func TestNewChecksConfig(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no node", func(c *Config) { c.NodeID = "" }, "runtime: invalid config: NodeID required"},
		{"no logger", func(c *Config) { c.Logger = nil }, "runtime: invalid config: Logger required"},
		{"no state dir", func(c *Config) { c.StateDir = "" }, "runtime: invalid config: StateDir required"},
		{"no key, no roots", func(c *Config) { c.PublisherKey = nil },
			"runtime: invalid config: TrustRoots (--ca-root) or PublisherKey (--publisher-key) required to verify manifests (or InsecureSkipManifest)"},
		{"short key", func(c *Config) { c.PublisherKey = c.PublisherKey[:31] }, "runtime: invalid config: PublisherKey: 31 bytes, want 32"},
		{"bad trust domain", func(c *Config) { c.TrustDomain = "Not A Domain" },
			`runtime: invalid config: TrustDomain: `},
		{"negative persist", func(c *Config) { c.PersistEvery = -time.Second }, "runtime: invalid config: PersistEvery -1s is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			tc.mod(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	cfg := e.config()
	cfg.PublisherKey, cfg.InsecureSkipManifest = nil, true
	if _, err := New(cfg); err != nil {
		t.Fatalf("insecure without key: %v", err)
	}
}

func TestActivationWaitsForMatchingManifest(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	ctx := context.Background()
	res := mesh("127.0.0.1:9001")

	// Intermediate push step: everything but the manifest. Accepted, not active.
	if err := r.Apply(ctx, e.update(r, res, "v1")); err != nil {
		t.Fatalf("Apply without manifest: %v", err)
	}
	if r.Load() != nil {
		t.Fatal("activated without a manifest")
	}
	if d := r.Dump(); d.Pending != "waiting for the signed manifest" || d.Ready || d.Reason != "no configuration yet: waiting for pilot" {
		t.Fatalf("dump = pending %q ready %v reason %q", d.Pending, d.Ready, d.Reason)
	}
	// A manifest that also covers a resource not received yet: still waiting.
	extra := manifest.Entry{TypeURL: xdsresource.ClusterType, Name: "not-yet", SHA256: manifest.Hash([]byte("x"))}
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{extra: []manifest.Entry{extra}}))); err != nil {
		t.Fatalf("Apply with ahead manifest: %v", err)
	}
	if r.Load() != nil {
		t.Fatal("activated with a manifest that does not match")
	}
	// The digest covers one more resource than the candidate has.
	want := `candidate not yet covered by manifest revision 1: resources do not match manifest digest: 4 resources digest to `
	if got := r.Dump().Pending; !strings.HasPrefix(got, want) || !strings.Contains(got, ", manifest revision 1 has 5 resources with digest ") {
		t.Fatalf("pending = %q, want %q...", got, want)
	}
	// The matching manifest completes the push.
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{revision: 3}))); err != nil {
		t.Fatalf("Apply matching: %v", err)
	}
	if r.Load() == nil {
		t.Fatal("not activated")
	}
	d := r.Dump()
	if !d.Ready || d.Pending != "" || d.Active.Revision != 3 || d.Active.Source != SourceXDS || d.Active.Manifest.KeyID != manifest.KeyID(e.pub) {
		t.Fatalf("dump after activation = %+v active %+v", d, d.Active)
	}
	if ok, body := r.Ready(); !ok || body != "ready" {
		t.Fatalf("Ready = %v %q", ok, body)
	}
	// Persisted as last-known-good.
	e.flush()
	if _, m, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0); err != nil || m.Revision != 3 {
		t.Fatalf("lkg.Load = %v, %v", m, err)
	}
	if d := r.Dump(); d.LastKnownGood.SavedAt.IsZero() || d.LastKnownGood.Path != filepath.Join(e.dir, lkg.FileName) {
		t.Fatalf("lkg info = %+v", d.LastKnownGood)
	}
}

func TestSameContentIsNoOpAndResignExtendsValidity(t *testing.T) {
	e := newEnv(t)
	var compiles int
	r := e.runtime(func(c *Config) {
		c.Compile = func(st map[string]map[string]any) (*dataplane.Config, error) {
			compiles++
			return dataplane.Compile(st)
		}
	})
	ctx := context.Background()
	res := mesh("127.0.0.1:9001")
	sm := e.sign(res, signOpts{})
	if err := r.Apply(ctx, e.update(r, res, "v1", sm)); err != nil {
		t.Fatal(err)
	}
	first := r.Load()
	if err := r.Apply(ctx, e.update(r, res, "v1", sm)); err != nil {
		t.Fatal(err)
	}
	if r.Load() != first || compiles != 1 || r.Dump().Counters.NoOps != 1 {
		t.Fatalf("second apply: same pointer %v, compiles %d, noops %d", r.Load() == first, compiles, r.Dump().Counters.NoOps)
	}
	// Pilot re-signs the same resources later: no recompile, new validity on disk.
	e.clock.Set(t0.Add(time.Hour))
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	if r.Load() != first || compiles != 1 {
		t.Fatalf("re-signed apply recompiled: same pointer %v, compiles %d", r.Load() == first, compiles)
	}
	e.flush()
	if _, m, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0.Add(24*time.Hour+time.Minute)); err != nil || !m.ValidUntil.Equal(t0.Add(25*time.Hour)) {
		t.Fatalf("lkg after re-sign = %v, %v", m, err)
	}
	// And a restart can use it: the file's manifest and its manifest resource agree.
	e.clock.Set(t0.Add(24*time.Hour + time.Minute))
	r2 := e.runtime(func(c *Config) { c.Overrides = overrides(t, "routes=1h/48h", "listeners=1h/48h", "clusters=1h/48h") })
	if _, err := r2.LoadLastKnownGood(); err != nil || !r2.ActivateLastKnownGood() {
		t.Fatalf("restart after re-sign: %v", err)
	}
}

func TestCompileFailureNACKsAndKeepsOld(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	ctx := context.Background()
	good := mesh("127.0.0.1:9001")
	if err := r.Apply(ctx, e.update(r, good, "v1", e.sign(good, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	old := r.Load()
	// A route to a cluster that does not exist: every resource is valid alone, the
	// whole does not compile.
	bad := dt.Resources{}
	for typ, ms := range good {
		if typ != xdsresource.RouteType {
			bad[typ] = ms
		}
	}
	bad.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "nowhere", 0))))
	_, compileErr := dataplane.Compile(mustState(t, bad))
	if compileErr == nil {
		t.Fatal("bad config compiles")
	}
	err := r.Apply(ctx, e.update(r, bad, "v2", e.sign(bad, signOpts{revision: 2})))
	if err == nil || err.Error() != "activation: "+compileErr.Error() || !errors.Is(err, dataplane.ErrInvalid) {
		t.Fatalf("Apply bad = %v, want activation: %v", err, compileErr)
	}
	if got := r.Dump().Pending; got != "latest candidate refused: "+compileErr.Error() {
		t.Fatalf("pending = %q", got)
	}
	if r.Load() != old || r.Dump().Active.Revision != 1 || r.Dump().Counters.Rejected != 1 {
		t.Fatalf("old config not kept: dump %+v", r.Dump().Active)
	}
	e.flush()
	if _, m, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, t0); err != nil || m.Revision != 1 {
		t.Fatalf("lkg changed by a refused candidate: %v %v", m, err)
	}
	// The next good version recovers.
	good2 := mesh("127.0.0.1:9002")
	if err := r.Apply(ctx, e.update(r, good2, "v3", e.sign(good2, signOpts{revision: 3}))); err != nil || r.Dump().Active.Revision != 3 {
		t.Fatalf("recovery: %v", err)
	}
}

func mustState(t *testing.T, res dt.Resources) map[string]map[string]any {
	t.Helper()
	st, err := res.State()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestDecodeManifestRefusals(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	res := mesh("127.0.0.1:9001")
	other := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	tests := []struct {
		name  string
		any   *anypb.Any
		check string
		is    error
	}{
		{"other publisher", e.sign(res, signOpts{priv: other}), "publisher key", manifest.ErrKey},
		{"other node", e.sign(res, signOpts{node: "someone-else"}), "node", manifest.ErrNode},
		{"expired", e.sign(res, signOpts{issued: t0.Add(-2 * time.Hour), validity: time.Hour}), "validity", manifest.ErrExpired},
		{"not yet valid", e.sign(res, signOpts{issued: t0.Add(time.Hour)}), "validity", manifest.ErrNotYet},
		{"binding to another scope", e.sign(res, signOpts{bindTo: "other-scope"}), "scope", manifest.ErrScope},
		{"garbage", &anypb.Any{TypeUrl: manifest.TypeURL, Value: []byte{0xff, 0xff}}, "format", manifest.ErrMalformed},
		{"over MaxBytes", &anypb.Any{TypeUrl: manifest.TypeURL, Value: make([]byte, manifest.MaxBytes+1)}, "format", manifest.ErrMalformed},
		{"one content byte altered", flipContent(t, e.sign(res, signOpts{})), "signature", manifest.ErrSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, v, err := r.Decode(manifest.TypeURL, tc.any)
			if err == nil || !errors.Is(err, tc.is) || Check(err) != tc.check || name != manifest.Name || v != nil {
				t.Fatalf("Decode = %q %v %v; want %v (check %s)", name, v, err, tc.is, tc.check)
			}
			if tc.check != "format" && !strings.HasPrefix(err.Error(), "manifest refused ("+tc.check+"): ") {
				t.Fatalf("message %q does not name the check", err)
			}
		})
	}
}

// flipContent alters one byte of the signed content statement of a manifest.
func flipContent(t *testing.T, a *anypb.Any) *anypb.Any {
	t.Helper()
	sm, err := manifest.Decode(a.GetValue())
	if err != nil {
		t.Fatal(err)
	}
	sm.Content[len(sm.Content)/2] ^= 1
	b, err := proto.Marshal(sm)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: manifest.TypeURL, Value: b}
}

func TestInsecureSkipManifest(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) { c.PublisherKey, c.InsecureSkipManifest = nil, true })
	if got := r.Types(); len(got) != 6 || got[2] != xdsresource.LbEndpointType || got[5] != "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret" {
		t.Fatalf("Types = %v, want the four Envoy types, LEDS after EDS, and SDS", got)
	}
	res := mesh("127.0.0.1:9001")
	u := e.update(r, res, "v1")
	u.Missing = map[string][]string{xdsresource.EndpointType: {"backend"}}
	if err := r.Apply(context.Background(), u); err != nil || r.Load() != nil {
		t.Fatalf("warming candidate: err %v active %v", err, r.Load() != nil)
	}
	if got := r.Dump().Pending; got != "warming: waiting for [ClusterLoadAssignment backend]" {
		t.Fatalf("pending = %q", got)
	}
	u.Missing = nil
	if err := r.Apply(context.Background(), u); err != nil || r.Load() == nil {
		t.Fatalf("complete candidate: err %v active %v", err, r.Load() != nil)
	}
	if _, err := os.Stat(filepath.Join(e.dir, lkg.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("insecure mode persisted an unsigned snapshot: %v", err)
	}
	if _, err := r.LoadLastKnownGood(); !errors.Is(err, lkg.ErrNoSnapshot) {
		t.Fatalf("LoadLastKnownGood insecure = %v", err)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.runtime(func(c *Config) { c.Metrics = m; c.Overrides = overrides(t, "routes=1s/3s") })
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0.Add(5*time.Second), time.Time{})
	if got := value(t, m.activations.WithLabelValues(SourceXDS)); got != 1 {
		t.Errorf("activations = %v", got)
	}
	var hist dto.Metric
	if err := m.activationDuration.Write(&hist); err != nil {
		t.Fatal(err)
	}
	took := r.LastActivation()
	if hist.Histogram.GetSampleCount() != 1 || took <= 0 || hist.Histogram.GetSampleSum() != took.Seconds() {
		t.Errorf("activation duration: %d samples, sum %v; LastActivation %s", hist.Histogram.GetSampleCount(), hist.Histogram.GetSampleSum(), took)
	}
	// The same content again is a no-op, not an activation: not observed.
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	if err := m.activationDuration.Write(&hist); err != nil {
		t.Fatal(err)
	}
	if hist.Histogram.GetSampleCount() != 1 {
		t.Errorf("a no-op Apply was observed: %d samples", hist.Histogram.GetSampleCount())
	}
	if got := value(t, m.age.WithLabelValues("routes")); got != 5 {
		t.Errorf("routes age = %v", got)
	}
	if got := value(t, m.level.WithLabelValues("routes")); got != 3 {
		t.Errorf("routes level = %v", got)
	}
	if got := value(t, m.ready); got != 0 {
		t.Errorf("ready = %v", got)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
