package ejectreport

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const svc = "outbound|9080||reviews.shop.svc.cluster.local"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

type fakeConn struct{ grpc.ClientConnInterface } // a distinct identity per connection

func TestDue(t *testing.T) {
	s := state{minInterval: 2 * time.Second, refresh: 30 * time.Second}
	c1, c2 := &fakeConn{}, &fakeConn{}
	k0 := key{}
	k1 := keyOf(&outlierreport.Report{Total: 1, Entries: []outlierreport.Entry{{Service: svc, Endpoint: "10.0.0.3:80", Detector: 1, Times: 1}}})
	k1b := keyOf(&outlierreport.Report{Total: 1, Entries: []outlierreport.Entry{{Service: svc, Endpoint: "10.0.0.3:80", Detector: 1, Times: 1, Age: time.Hour}}})
	k2 := keyOf(&outlierreport.Report{Total: 1, Entries: []outlierreport.Entry{{Service: svc, Endpoint: "10.0.0.3:80", Detector: 1, Times: 2}}})
	for i, st := range []struct {
		now  float64
		k    key
		cc   grpc.ClientConnInterface
		due  bool
		then string // "sent", "attempted" (dropped/refused) or ""
	}{
		{0, k0, c1, true, "attempted"}, // first report: due (empty, so pilot knows we report)
		{1.999, k0, c1, false, ""},     // within minInterval of the failed attempt
		{2, k0, c1, true, "sent"},      // retried at minInterval
		{3, k0, c1, false, ""},         // unchanged, within refresh
		{4.5, k1, c1, true, "sent"},    // changed: sent
		{5, k2, c1, false, ""},         // changed again within minInterval: waits (coalesced)
		{6.5, k2, c1, true, "sent"},    // then goes
		{9, k2, c1, false, ""},         // unchanged
		{9, k1b, c1, true, ""},         // an age alone is not a change, but k1 ≠ k2: due
		{20, k2, c2, true, "sent"},     // a new stream: pilot dropped our report, resend
		{49.999, k2, c2, false, ""},    // unchanged up to refresh
		{50, k2, c2, true, "sent"},     // refresh
	} {
		if got := s.Due(at(st.now), st.k, st.cc); got != st.due {
			t.Fatalf("line %d (t=%v): due %v, want %v", i, st.now, got, st.due)
		}
		switch st.then {
		case "sent":
			s.attempted(at(st.now))
			s.sent(at(st.now), st.k, st.cc)
		case "attempted":
			s.attempted(at(st.now))
		}
	}
	if !k1.equal(k1b) {
		t.Error("reports differing only in age are different keys")
	}
}

func TestEntries(t *testing.T) {
	now := at(100)
	var es []outlier.Ejection
	for _, k := range outlier.Kinds() {
		es = append(es, outlier.Ejection{Service: svc, Host: fmt.Sprintf("10.0.0.%d:80", k), Detector: k, Since: at(90), Multiplier: uint32(k)})
	}
	es = append(es, outlier.Ejection{Service: svc, Host: "10.0.0.99:80", Detector: outlier.KindConsecutive5xx, Since: at(101), Multiplier: 0})
	got := Entries(now, es)
	want := []outlierreport.Detector{outlierreport.Consecutive5xx, outlierreport.ConsecutiveGatewayErrors, outlierreport.ConsecutiveLocalOriginFailures,
		outlierreport.SuccessRate, outlierreport.SuccessRateLocalOrigin, outlierreport.FailurePercentage, outlierreport.FailurePercentageLocalOrigin}
	for i, d := range want {
		e := got[i]
		if e.Detector != d || e.Age != 10*time.Second || e.Times != uint32(i+1) || e.Endpoint != es[i].Host || e.Service != svc {
			t.Errorf("%s: %+v", outlier.Kinds()[i], e)
		}
		// The wire and the sidecar name every detector alike.
		if d.String() != outlier.Kinds()[i].String() {
			t.Errorf("detector %d: wire %q, sidecar %q", i, d, outlier.Kinds()[i])
		}
	}
	// A Since after now (clock step) is age 0; multiplier 0 is times 1.
	if e := got[len(got)-1]; e.Age != 0 || e.Times != 1 {
		t.Errorf("clamps: %+v", e)
	}
	r := outlierreport.Fit("n", got)
	if _, err := outlierreport.Encode(&r); err != nil || len(r.Entries) != 8 {
		t.Errorf("the entries do not make a report: %v (%d entries)", err, len(r.Entries))
	}
}

// pilot is a real gRPC server with the real service description; its handler
// is the test's.
type pilot struct {
	handle   func(ctx context.Context, r *outlierreport.Report) error
	inFlight atomic.Int32
	maxIn    atomic.Int32
	calls    atomic.Int32
}

func (p *pilot) Report(ctx context.Context, req *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.maxIn.Load()
		if n <= m || p.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	p.calls.Add(1)
	r, err := outlierreport.Decode(req.GetValue())
	if err != nil {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if err := p.handle(ctx, r); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func serve(t *testing.T, p *pilot) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	g.RegisterService(&outlierreport.ServiceDesc, p)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); g.Stop(); <-done })
	return cc
}

// run starts r until the test ends.
func run(t *testing.T, r *Reporter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// source is a changing set of ejections the test controls.
type source struct {
	mu    sync.Mutex
	es    []outlierreport.Entry
	reads atomic.Int64
}

func (s *source) set(eps ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.es = nil
	for _, ep := range eps {
		s.es = append(s.es, outlierreport.Entry{Service: svc, Endpoint: ep, Detector: outlierreport.Consecutive5xx, Times: 1})
	}
}

func (s *source) read(time.Time) []outlierreport.Entry {
	s.reads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outlierreport.Entry(nil), s.es...)
}

func newReporter(t *testing.T, src *source, conn func() grpc.ClientConnInterface, o func(*Config)) *Reporter {
	t.Helper()
	cfg := Config{Node: "web-1", Logger: hclog.NewNullLogger(), Source: src.read, Conn: conn,
		CheckInterval: 5 * time.Millisecond, MinInterval: 20 * time.Millisecond, Refresh: time.Second, SendTimeout: 50 * time.Millisecond}
	if o != nil {
		o(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Pilot answers nothing: each report is dropped at SendTimeout, at most one is
// ever in flight, nothing piles up, and the reporter keeps reading the latest
// snapshot (the request path never waits on any of it: it never calls in).
func TestDropsWhenPilotSlow(t *testing.T) {
	release := make(chan struct{})
	p := &pilot{handle: func(ctx context.Context, r *outlierreport.Report) error {
		select {
		case <-ctx.Done(): // the sidecar gave up
		case <-release:
		}
		return ctx.Err()
	}}
	cc := serve(t, p)
	src := &source{}
	src.set("10.0.0.3:9080")
	r := newReporter(t, src, func() grpc.ClientConnInterface { return cc }, nil)
	run(t, r)
	testkit.Eventually(t, 20*time.Second, "five reports dropped at their timeout", func() bool { return r.Count(ResultTimeout) >= 5 })
	// Changes while pilot is slow are coalesced into the next attempt: the
	// reporter still reads the snapshot.
	before := src.reads.Load()
	src.set("10.0.0.3:9080", "10.0.0.4:9080")
	testkit.Eventually(t, 20*time.Second, "snapshot read again", func() bool { return src.reads.Load() > before })
	if m := p.maxIn.Load(); m != 1 {
		t.Errorf("%d reports were in flight at once, want 1", m)
	}
	if r.Count(ResultSent) != 0 {
		t.Errorf("%d sent", r.Count(ResultSent))
	}
	// Pilot recovers: the next report goes, and only one (nothing was queued).
	close(release)
	testkit.Eventually(t, 20*time.Second, "a report sent after pilot recovered", func() bool { return r.Count(ResultSent) >= 1 })
}

func TestSendsOnChangeAndRefresh(t *testing.T) {
	var mu sync.Mutex
	var got []*outlierreport.Report
	p := &pilot{handle: func(ctx context.Context, r *outlierreport.Report) error {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		return nil
	}}
	cc := serve(t, p)
	src := &source{}
	reg := prometheus.NewRegistry()
	r := newReporter(t, src, func() grpc.ClientConnInterface { return cc }, func(c *Config) { c.Registerer = reg; c.Refresh = 300 * time.Millisecond })
	run(t, r)
	last := func() *outlierreport.Report {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return nil
		}
		return got[len(got)-1]
	}
	testkit.Eventually(t, 20*time.Second, "the first (empty) report", func() bool { r := last(); return r != nil && len(r.Entries) == 0 && r.Node == "web-1" })
	src.set("10.0.0.3:9080")
	testkit.Eventually(t, 20*time.Second, "the change reported", func() bool { r := last(); return r != nil && len(r.Entries) == 1 })
	n := p.calls.Load()
	// Unchanged: the next report is the refresh, not one per check.
	testkit.Eventually(t, 20*time.Second, "a refresh", func() bool { return p.calls.Load() > n })
	if c := p.calls.Load(); c > n+3 {
		t.Errorf("%d reports while unchanged; want only refreshes", c-n)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "weft_sidecar_outlier_reports_total" || len(mfs[0].GetMetric()) != len(results) {
		t.Fatalf("metrics: %v %v", mfs, err)
	}
}

func TestDropsWithoutStreamOrUnderLoad(t *testing.T) {
	p := &pilot{handle: func(context.Context, *outlierreport.Report) error { return nil }}
	cc := serve(t, p)
	var connected, shedding atomic.Bool
	shedding.Store(true)
	src := &source{}
	r := newReporter(t, src, func() grpc.ClientConnInterface {
		if connected.Load() {
			return cc
		}
		return nil
	}, func(c *Config) { c.Shedding = shedding.Load })
	run(t, r)
	testkit.Eventually(t, 20*time.Second, "dropped: no stream", func() bool { return r.Count(ResultNoStream) >= 2 })
	connected.Store(true)
	testkit.Eventually(t, 20*time.Second, "dropped: overload", func() bool { return r.Count(ResultOverload) >= 2 })
	if p.calls.Load() != 0 || r.Count(ResultSent) != 0 {
		t.Fatalf("sent while shedding: %d calls", p.calls.Load())
	}
	shedding.Store(false)
	testkit.Eventually(t, 20*time.Second, "sent once load is gone", func() bool { return r.Count(ResultSent) >= 1 })
}

func TestRefusedIsCounted(t *testing.T) {
	p := &pilot{handle: func(context.Context, *outlierreport.Report) error {
		return grpcstatus.Error(codes.FailedPrecondition, "no ADS stream of this node from this peer")
	}}
	cc := serve(t, p)
	r := newReporter(t, &source{}, func() grpc.ClientConnInterface { return cc }, nil)
	run(t, r)
	testkit.Eventually(t, 20*time.Second, "refusals counted", func() bool { return r.Count(ResultRefused) >= 2 })
}

func TestConfig(t *testing.T) {
	src := &source{}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.SendTimeout = MaxSendTimeout }, ""},
		{func(c *Config) { c.SendTimeout = MaxSendTimeout + time.Nanosecond }, "send timeout 2.000000001s exceeds 2s"},
		{func(c *Config) { c.Refresh = outlierreport.RefreshInterval }, ""},
		{func(c *Config) { c.Refresh = outlierreport.RefreshInterval + time.Nanosecond }, "refresh 30.000000001s exceeds 30s"},
		{func(c *Config) { c.Source = nil }, "a Source and a Conn are required"},
		{func(c *Config) { c.CheckInterval = -1 }, "CheckInterval -1ns is negative"},
		{func(c *Config) { c.Node = "" }, "node: empty"},
	} {
		cfg := Config{Node: "n", Logger: hclog.NewNullLogger(), Source: src.read, Conn: func() grpc.ClientConnInterface { return nil }}
		tc.edit(&cfg)
		_, err := New(cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", cfg, err, tc.want)
		}
	}
}
