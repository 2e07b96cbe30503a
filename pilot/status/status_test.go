package status

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1700000000, 0).UTC()

type fakeClock struct{ now time.Time }

func (f *fakeClock) Now() time.Time { return f.now }

func newTracker(t *testing.T, clk *fakeClock) (*Tracker, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	tr, err := New(Config{Logger: hclog.NewNullLogger(), Registerer: reg, Retention: time.Minute, MaxDisconnected: 2, MaxRevisions: 3, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return tr, reg
}

func TestConfigCheck(t *testing.T) {
	ok := Config{Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(), Retention: time.Minute, MaxDisconnected: 1, MaxRevisions: 1}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"logger", func(c *Config) { c.Logger = nil }, "status: Config.Logger is required"},
		{"registerer", func(c *Config) { c.Registerer = nil }, "status: Config.Registerer is required"},
		{"retention", func(c *Config) { c.Retention = 0 }, "status: Config.Retention must be > 0, got 0s"},
		{"max disconnected", func(c *Config) { c.MaxDisconnected = 0 }, "status: Config.MaxDisconnected must be > 0, got 0"},
		{"max revisions", func(c *Config) { c.MaxRevisions = -1 }, "status: Config.MaxRevisions must be > 0, got -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := New(c)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	reg := prometheus.NewRegistry()
	ok.Registerer = reg
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ok); err == nil || !strings.HasPrefix(err.Error(), "status: register metrics: ") {
		t.Fatalf("second New on one registry: err = %v", err)
	}
}

func snap(t *testing.T, rev int64, clusters ...string) *snapshot.Snapshot {
	t.Helper()
	m := map[string]proto.Message{}
	for _, c := range clusters {
		m[c] = &clusterv3.Cluster{Name: c}
	}
	s, err := snapshot.New(rev, map[string]map[string]proto.Message{snapshot.ClusterType: m})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTypeLifecycle(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, reg := newTracker(t, clk)
	tr.RevisionWritten(1, t0)
	c := tr.Connect(&node.Node{ID: "p1", Namespace: "shop"}, t0.Add(-time.Second))
	cds := snapshot.ClusterType
	s1, s2 := snap(t, 1, "a"), snap(t, 2, "a", "b")
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		name      string
		do        func()
		status    Status
		effective int64
		want      TypeStatus
	}{
		{"subscribed", func() { c.Subscribed(cds, at(0)) }, NotSent, 0,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: NotSent}},
		{"sent v1", func() {
			c.Sent(Sent{Type: cds, Version: "v1", Nonce: "1", Revision: 1, Bytes: 10, Snapshot: s1}, at(1))
		}, PendingAck, 0,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: PendingAck, VersionSent: "v1", Nonce: "1", RevisionSent: 1, PendingSince: ptr(at(1))}},
		{"stale ack ignored", func() { c.Acked(cds, "0", at(2)) }, PendingAck, 0,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: PendingAck, VersionSent: "v1", Nonce: "1", RevisionSent: 1, PendingSince: ptr(at(1))}},
		{"ack v1", func() { c.Acked(cds, "1", at(3)) }, Synced, 1,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: Synced, VersionSent: "v1", Nonce: "1", RevisionSent: 1, VersionAcked: "v1", RevisionAcked: 1}},
		{"sent v2", func() {
			c.Sent(Sent{Type: cds, Version: "v2", Nonce: "2", Revision: 2, Bytes: 20, Snapshot: s2}, at(4))
		}, PendingAck, 1,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: PendingAck, VersionSent: "v2", Nonce: "2", RevisionSent: 2, VersionAcked: "v1", RevisionAcked: 1, PendingSince: ptr(at(4))}},
		{"nack v2", func() { c.Nacked(cds, "2", "bad cluster b", at(5)) }, Nacked, 1,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: Nacked, VersionSent: "v2", Nonce: "2", RevisionSent: 2, VersionAcked: "v1", RevisionAcked: 1, VersionRejected: "v2", NonceRejected: "2", Error: "bad cluster b"}},
		{"rev 3 same content: still nacked at 1", func() { c.Unchanged(cds, 3, s2, nil, at(6)) }, Nacked, 1,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: Nacked, VersionSent: "v2", Nonce: "2", RevisionSent: 3, VersionAcked: "v1", RevisionAcked: 1, VersionRejected: "v2", NonceRejected: "2", Error: "bad cluster b"}},
		{"sent v4", func() { c.Sent(Sent{Type: cds, Version: "v4", Nonce: "3", Revision: 4, Bytes: 5, Snapshot: s1}, at(7)) }, PendingAck, 1,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: PendingAck, VersionSent: "v4", Nonce: "3", RevisionSent: 4, VersionAcked: "v1", RevisionAcked: 1, VersionRejected: "v2", NonceRejected: "2", Error: "bad cluster b", PendingSince: ptr(at(7))}},
		{"ack v4", func() { c.Acked(cds, "3", at(8)) }, Synced, 4,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: Synced, VersionSent: "v4", Nonce: "3", RevisionSent: 4, VersionAcked: "v4", RevisionAcked: 4}},
		{"rev 5 unchanged while synced advances", func() { c.Unchanged(cds, 5, s1, nil, at(9)) }, Synced, 5,
			TypeStatus{Type: "CDS", TypeURL: cds, Status: Synced, VersionSent: "v4", Nonce: "3", RevisionSent: 5, VersionAcked: "v4", RevisionAcked: 5}},
	}
	for _, st := range steps {
		st.do()
		ps := c.Status()
		if ps.Status != st.status || ps.EffectiveRevision != st.effective {
			t.Fatalf("%s: status/effective = %s/%d, want %s/%d", st.name, ps.Status, ps.EffectiveRevision, st.status, st.effective)
		}
		if d := cmp.Diff([]TypeStatus{st.want}, ps.Types); d != "" {
			t.Fatalf("%s: types (-want +got):\n%s", st.name, d)
		}
	}
	if got := metric(t, reg, "weft_pilot_xds_pushes_total"); got != 3 {
		t.Errorf("pushes = %v, want 3", got)
	}
	if got := metric(t, reg, "weft_pilot_xds_push_bytes_total"); got != 35 {
		t.Errorf("push bytes = %v, want 35", got)
	}
	if got := metric(t, reg, "weft_pilot_xds_nacks_total"); got != 1 {
		t.Errorf("nacks = %v, want 1", got)
	}
	if got := metric(t, reg, "weft_pilot_xds_connected_proxies"); got != 1 {
		t.Errorf("connected = %v, want 1", got)
	}
	if n := metric(t, reg, "weft_pilot_xds_convergence_seconds"); n != 1 {
		t.Errorf("convergence observations = %v, want 1", n)
	}
	rs := tr.Revision(1)
	if rs.ConvergenceSeconds == nil || *rs.ConvergenceSeconds != 3 {
		t.Errorf("revision 1 convergence = %v, want 3s (write at t0, ack at t0+3s)", rs.ConvergenceSeconds)
	}
}

// TestHeldOnReconnect: a proxy that reconnects already holding the current content
// (delta initial_resource_versions) is sent nothing for that type, and is SYNCED at
// that revision, not NOT_SENT.
func TestHeldOnReconnect(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	tr.RevisionWritten(2, t0)
	c := tr.Connect(&node.Node{ID: "p1", Namespace: "shop"}, t0)
	cds := snapshot.ClusterType
	s := snap(t, 2, "a")
	c.Subscribed(cds, t0)
	if got := c.Status().Types[0].Status; got != NotSent {
		t.Fatalf("before: %s, want NOT_SENT", got)
	}
	c.Unchanged(cds, 2, s, nil, t0.Add(time.Second))
	ps := c.Status()
	want := TypeStatus{Type: "CDS", TypeURL: cds, Status: Synced, RevisionSent: 2, VersionAcked: s.Version(cds), RevisionAcked: 2}
	if d := cmp.Diff([]TypeStatus{want}, ps.Types); d != "" {
		t.Fatalf("types (-want +got):\n%s", d)
	}
	if ps.EffectiveRevision != 2 {
		t.Fatalf("effective = %d, want 2", ps.EffectiveRevision)
	}
}

func ptr[T any](v T) *T { return &v }

func TestRevisionRollout(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	cds := snapshot.ClusterType
	before := t0.Add(-time.Minute)
	synced := tr.Connect(&node.Node{ID: "synced"}, before)
	nacked := tr.Connect(&node.Node{ID: "nacked"}, before)
	pending := tr.Connect(&node.Node{ID: "pending"}, before)
	gone := tr.Connect(&node.Node{ID: "gone"}, before)
	for i := int64(1); i <= 4; i++ {
		tr.RevisionWritten(i, t0.Add(time.Duration(i)*time.Second))
	}
	tr.RevisionWritten(4, t0) // duplicates keep the first write time
	s := snap(t, 4, "a")
	for _, c := range []*Conn{synced, nacked, pending} {
		c.Sent(Sent{Type: cds, Version: "v4", Nonce: "1", Revision: 4, Snapshot: s}, t0.Add(5*time.Second))
	}
	synced.Acked(cds, "1", t0.Add(6*time.Second))
	nacked.Nacked(cds, "1", "boom", t0.Add(6*time.Second))
	gone.Disconnect(t0.Add(time.Second))

	got := tr.Revision(4)
	w, a, conv := t0.Add(4*time.Second), t0.Add(6*time.Second), 2.0
	want := RevisionStatus{Revision: 4, WrittenAt: &w, Connected: 3, Effective: 1, Pending: 1, Rejected: 1, LastAckAt: &a,
		Rejections: []Rejection{{Node: "nacked", Type: "CDS", Version: "v4", Nonce: "1", Error: "boom"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("revision 4 (-want +got):\n%s", d)
	}
	// Revision 5 is written: the NACK was of revision 4's content, so until its
	// stream evaluates revision 5 the proxy is pending for it, not rejected.
	tr.RevisionWritten(5, t0.Add(5*time.Second))
	if got := tr.Revision(5); got.Rejected != 0 || got.Pending != 3 {
		t.Fatalf("revision 5 before evaluation: %+v, want 3 pending, 0 rejected", got)
	}
	nacked.Unchanged(cds, 5, s, nil, t0.Add(6*time.Second)) // revision 5 keeps the rejected content
	if got := tr.Revision(5); got.Rejected != 1 || len(got.Rejections) != 1 {
		t.Fatalf("revision 5 carrying the rejected content: %+v, want 1 rejected", got)
	}
	pending.Acked(cds, "1", t0.Add(7*time.Second))
	nacked.Sent(Sent{Type: cds, Version: "v5", Nonce: "2", Revision: 4, Snapshot: s}, t0.Add(7*time.Second))
	nacked.Acked(cds, "2", t0.Add(8*time.Second))
	got = tr.Revision(4)
	a = t0.Add(8 * time.Second)
	conv = 4
	want = RevisionStatus{Revision: 4, WrittenAt: &w, Connected: 3, Effective: 3, Converged: true, LastAckAt: &a, ConvergenceSeconds: &conv}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("revision 4 converged (-want +got):\n%s", d)
	}
	if rev, err := tr.LatestRevision(); err != nil || rev != 5 {
		t.Fatalf("latest = %d, %v", rev, err)
	}
	// MaxRevisions=3: revision 1 fell out of the window; it is still answered.
	if got := tr.Revision(1); got.WrittenAt != nil || !got.Converged {
		t.Fatalf("revision 1 = %+v, want no write time, converged", got)
	}
	// A proxy that connects after the write does not stretch the convergence time.
	late := tr.Connect(&node.Node{ID: "late"}, t0.Add(time.Hour))
	late.Sent(Sent{Type: cds, Version: "v4", Nonce: "1", Revision: 4, Snapshot: s}, t0.Add(time.Hour))
	late.Acked(cds, "1", t0.Add(time.Hour))
	if got := tr.Revision(4); got.LastAckAt == nil || !got.LastAckAt.Equal(a) {
		t.Fatalf("last ack = %v, want %v", got.LastAckAt, a)
	}
}

func TestNoRevisions(t *testing.T) {
	tr, _ := newTracker(t, &fakeClock{now: t0})
	if _, err := tr.LatestRevision(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if _, err := tr.Proxy("nope"); err == nil || err.Error() != `proxy "nope": not found` {
		t.Fatalf("err = %v", err)
	}
}

func TestDisconnectRetention(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, reg := newTracker(t, clk) // Retention 1m, MaxDisconnected 2
	ids := func() []string {
		var out []string
		for _, p := range tr.Proxies() {
			out = append(out, p.Node+"="+string(p.Status))
		}
		return out
	}
	a := tr.Connect(&node.Node{ID: "a"}, t0)
	b := tr.Connect(&node.Node{ID: "b"}, t0)
	c := tr.Connect(&node.Node{ID: "c"}, t0)
	a.Disconnect(t0)
	b.Disconnect(t0.Add(time.Second))
	if d := cmp.Diff([]string{"a=DISCONNECTED", "b=DISCONNECTED", "c=NOT_SENT"}, ids()); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	c.Disconnect(t0.Add(2 * time.Second)) // third disconnected: over MaxDisconnected, oldest goes
	if d := cmp.Diff([]string{"b=DISCONNECTED", "c=DISCONNECTED"}, ids()); d != "" {
		t.Fatalf("cap (-want +got):\n%s", d)
	}
	clk.now = t0.Add(61 * time.Second) // b is past the retention, c is not
	if d := cmp.Diff([]string{"c=DISCONNECTED"}, ids()); d != "" {
		t.Fatalf("retention (-want +got):\n%s", d)
	}
	// A reconnect replaces the record; the old stream's disconnect does not hide it.
	old := tr.Connect(&node.Node{ID: "d"}, clk.now)
	cur := tr.Connect(&node.Node{ID: "d"}, clk.now)
	old.Disconnect(clk.now)
	if d := cmp.Diff([]string{"c=DISCONNECTED", "d=NOT_SENT"}, ids()); d != "" {
		t.Fatalf("reconnect (-want +got):\n%s", d)
	}
	cur.Disconnect(clk.now)
	if got := metric(t, reg, "weft_pilot_xds_connected_proxies"); got != 0 {
		t.Fatalf("connected gauge = %v, want 0", got)
	}
}

func TestHandler(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	tr.RevisionWritten(7, t0)
	c := tr.Connect(&node.Node{ID: "sc/1", Namespace: "shop"}, t0.Add(-time.Second))
	c.Sent(Sent{Type: snapshot.ClusterType, Version: "v", Nonce: "1", Revision: 7, Snapshot: snap(t, 7, "x", "y"), Only: map[string]struct{}{"y": {}, "gone": {}}}, t0)
	c.Nacked(snapshot.ClusterType, "1", "no", t0)
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	tests := []struct {
		path string
		code int
		want string // substring of the body
	}{
		{"/apis/status/v1/proxies", 200, `"node": "sc/1"`},
		{"/apis/status/v1/proxies/sc%2F1", 200, `"status": "NACKED"`},
		{"/apis/status/v1/proxies/nope", 404, `"error": "proxy \"nope\": not found"`},
		{"/apis/status/v1/proxies/sc%2F1/config_dump", 200, `"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster"`},
		{"/apis/status/v1/proxies/nope/config_dump", 404, `not found`},
		{"/apis/status/v1/revisions/7", 200, `"rejected": 1`},
		{"/apis/status/v1/revisions/latest", 200, `"revision": 7`},
		{"/apis/status/v1/revisions/x", 400, `"error": "revision \"x\": want a non-negative integer or \"latest\""`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var raw json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
				t.Fatal(err)
			}
			var pretty strings.Builder
			enc := json.NewEncoder(&pretty)
			enc.SetIndent("", "  ")
			_ = enc.Encode(raw)
			if resp.StatusCode != tc.code || !strings.Contains(pretty.String(), tc.want) {
				t.Fatalf("code %d body %s; want %d containing %s", resp.StatusCode, pretty.String(), tc.code, tc.want)
			}
		})
	}
	dump := c.ConfigDump()
	if len(dump.Types) != 1 || len(dump.Types[0].Resources) != 1 || !strings.Contains(string(dump.Types[0].Resources[0]), `"name":"y"`) {
		t.Fatalf("config dump = %+v, want only cluster y", dump)
	}
	empty, _ := newTracker(t, clk)
	srv2 := httptest.NewServer(empty.Handler())
	defer srv2.Close()
	resp, err := http.Get(srv2.URL + "/apis/status/v1/revisions/latest")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("latest with no revisions: %d, want 404", resp.StatusCode)
	}
}

// metric returns the value of a single-series metric (a histogram's count).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.Metric) != 1 {
			t.Fatalf("%s: %d series, want 1", name, len(mf.Metric))
		}
		m := mf.Metric[0]
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
