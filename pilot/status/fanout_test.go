package status

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/bootstrap/node"
)

func at(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }

// TestMergeProxies: one entry per node; the replica a node is connected to
// wins over one that retains it as disconnected, else the one that saw it last.
func TestMergeProxies(t *testing.T) {
	ps := func(n string, lastSeen int, disc *time.Time) ProxyStatus {
		return ProxyStatus{Node: n, LastSeen: t0.Add(time.Duration(lastSeen) * time.Second), DisconnectedAt: disc}
	}
	type got struct{ Node, Replica string }
	tests := []struct {
		name string
		in   map[string][]ProxyStatus
		want []got
	}{
		{"disjoint", map[string][]ProxyStatus{"a": {ps("n2", 1, nil)}, "b": {ps("n1", 1, nil)}}, []got{{"n1", "b"}, {"n2", "a"}}},
		{"moved: connected beats disconnected though seen earlier", map[string][]ProxyStatus{
			"a": {ps("n1", 9, at(9))}, "b": {ps("n1", 5, nil)}}, []got{{"n1", "b"}}},
		{"both connected: last seen wins", map[string][]ProxyStatus{
			"a": {ps("n1", 3, nil)}, "b": {ps("n1", 4, nil)}}, []got{{"n1", "b"}}},
		{"both disconnected: last seen wins", map[string][]ProxyStatus{
			"a": {ps("n1", 7, at(7))}, "b": {ps("n1", 4, at(4))}}, []got{{"n1", "a"}}},
		{"equal: first replica id", map[string][]ProxyStatus{
			"b": {ps("n1", 4, nil)}, "a": {ps("n1", 4, nil)}}, []got{{"n1", "a"}}},
		{"none", map[string][]ProxyStatus{"a": nil}, []got{}},
	}
	for _, tc := range tests {
		out := []got{}
		for _, p := range MergeProxies(tc.in) {
			out = append(out, got{p.Node, p.Replica})
		}
		if d := cmp.Diff(tc.want, out); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestMergeRevisions: counts add up, written is the earliest, last ACK the
// latest, converged only when every replica's proxies are.
func TestMergeRevisions(t *testing.T) {
	a := RevisionStatus{Revision: 7, WrittenAt: at(1), LastAckAt: at(3), Connected: 2, Effective: 2, Converged: true,
		Rejections: []Rejection{{Node: "z", Type: "CDS"}}}
	b := RevisionStatus{Revision: 7, WrittenAt: at(2), LastAckAt: at(5), Connected: 3, Effective: 3, Converged: true,
		Rejections: []Rejection{{Node: "m", Type: "LDS"}}}
	c := RevisionStatus{Revision: 7, Connected: 1, Pending: 1}
	m := MergeRevisions([]RevisionStatus{a, b})
	secs := 4.0
	want := RevisionStatus{Revision: 7, WrittenAt: at(1), LastAckAt: at(5), Connected: 5, Effective: 5, Converged: true, ConvergenceSeconds: &secs,
		Rejections: []Rejection{{Node: "m", Type: "LDS"}, {Node: "z", Type: "CDS"}}}
	if d := cmp.Diff(want, m); d != "" {
		t.Fatalf("merge (-want +got):\n%s", d)
	}
	if m := MergeRevisions([]RevisionStatus{a, b, c}); m.Converged || m.Connected != 6 || m.Pending != 1 || m.ConvergenceSeconds != nil {
		t.Fatalf("with a pending proxy on a third replica: %+v", m)
	}
}

// TestFanOutHandler: two replicas' status APIs over real HTTP, each with its
// own proxies; either answers for both (a proxy's config dump from the replica
// it is on), a proxy that moved is reported from where it is connected, and an
// unreachable replica is named in the answer.
func TestFanOutHandler(t *testing.T) {
	clk := &fakeClock{now: t0}
	ta, _ := newTracker(t, clk)
	tb, _ := newTracker(t, clk)
	ta.Connect(&node.Node{ID: "n1"}, t0).Disconnect(t0.Add(time.Second)) // moved to b
	tb.Connect(&node.Node{ID: "n1"}, t0.Add(2*time.Second))
	ta.Connect(&node.Node{ID: "n2"}, t0)
	var peers []Peer
	list := func(context.Context) ([]Peer, error) { return peers, nil }
	const token = "s3cret"
	srv := func(tr *Tracker, self string) *httptest.Server {
		h := tr.FanOutHandler(FanOut{Self: self, Peers: list, Token: token})
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(s.Close)
		return s
	}
	sa, sb := srv(ta, "a"), srv(tb, "b")
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	peers = []Peer{{ID: "a", AdminURL: sa.URL}, {ID: "b", AdminURL: sb.URL}, {ID: "c", AdminURL: dead.URL}}
	get := func(u string, v any) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	for _, base := range []string{sa.URL, sb.URL} {
		var ans struct {
			Proxies  []ProxyStatus   `json:"proxies"`
			Replicas []ReplicaAnswer `json:"replicas"`
		}
		get(base+"/apis/status/v1/proxies", &ans)
		type row struct {
			Node, Replica string
			Status        Status
		}
		var rows []row
		for _, p := range ans.Proxies {
			rows = append(rows, row{p.Node, p.Replica, p.Status})
		}
		if d := cmp.Diff([]row{{"n1", "b", NotSent}, {"n2", "a", NotSent}}, rows); d != "" {
			t.Fatalf("proxies from %s (-want +got):\n%s", base, d)
		}
		var errs int
		for _, r := range ans.Replicas {
			if r.Error != "" {
				errs++
				if r.ID != "c" {
					t.Fatalf("replica %s failed: %s", r.ID, r.Error)
				}
			}
		}
		if len(ans.Replicas) != 3 || errs != 1 {
			t.Fatalf("replica answers %+v: want a, b and the unreachable c", ans.Replicas)
		}
		var one ProxyStatus
		if code := get(base+"/apis/status/v1/proxies/n1", &one); code != http.StatusOK || one.Replica != "b" || one.DisconnectedAt != nil {
			t.Fatalf("n1 from %s: %d %+v", base, code, one)
		}
		for _, n := range []string{"n1", "n2"} { // from the replica it is on, or from the other
			var dump ConfigDump
			if code := get(base+"/apis/status/v1/proxies/"+n+"/config_dump", &dump); code != http.StatusOK || dump.Node != n {
				t.Fatalf("%s's config dump from %s: %d %+v", n, base, code, dump)
			}
		}
		var missing map[string]string
		if code := get(base+"/apis/status/v1/proxies/nope", &missing); code != http.StatusNotFound {
			t.Fatalf("unknown proxy from %s: %d %v", base, code, missing)
		}
	}
	// ?local=true is one replica's own view.
	var own struct {
		Proxies []ProxyStatus `json:"proxies"`
	}
	get(sb.URL+"/apis/status/v1/proxies?local=true", &own)
	if len(own.Proxies) != 1 || own.Proxies[0].Node != "n1" {
		t.Fatalf("b's own proxies: %+v", own.Proxies)
	}
	// Listing the replicas failing is said, and the local view still served.
	peers = nil
	fail := ta.FanOutHandler(FanOut{Self: "a", Peers: func(context.Context) ([]Peer, error) { return nil, errors.New("etcd down") }})
	rec := httptest.NewRecorder()
	fail.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/status/v1/proxies", nil))
	var ans struct {
		Proxies  []ProxyStatus   `json:"proxies"`
		Replicas []ReplicaAnswer `json:"replicas"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil || len(ans.Proxies) != 2 || len(ans.Replicas) != 2 || ans.Replicas[1].Error != "listing replicas: etcd down" {
		t.Fatalf("with the replica list failing: %s", rec.Body.String())
	}
}
