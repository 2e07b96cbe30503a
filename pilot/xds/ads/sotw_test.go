package ads

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// sotwView is a SotW response reduced to what tests compare.
type sotwView struct {
	Type    string
	Version string
	Nonce   string
	Names   []string
}

func viewSotW(t *testing.T, r *discoveryv3.DiscoveryResponse) sotwView {
	t.Helper()
	v := sotwView{Type: status.TypeName(r.TypeUrl), Version: r.VersionInfo, Nonce: r.Nonce}
	for _, a := range r.Resources {
		if a.TypeUrl != r.TypeUrl {
			t.Fatalf("resource type %s in a %s response", a.TypeUrl, r.TypeUrl)
		}
		v.Names = append(v.Names, nameOf(t, a.TypeUrl, a.Value))
	}
	return v
}

func TestSotWWildcardExplicitAndUpdates(t *testing.T) {
	e := start(t, nil)
	s1 := mkSnap(t, 1, res{cds: {"c1": "a", "c2": "a"}, eds: {"c1": "a", "c2": "a"}})
	e.src.publish(s1)
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: cds}) // legacy wildcard
	r := c.recv()
	want := sotwView{Type: "CDS", Version: s1.Version(cds), Nonce: "1", Names: []string{"c1", "c2"}}
	if d := cmp.Diff(want, viewSotW(t, r)); d != "" {
		t.Fatalf("CDS (-want +got):\n%s", d)
	}
	c.ack(r)
	// EDS by name, including one that does not exist: only existing names come back.
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"c2", "nope"}})
	r = c.recv()
	want = sotwView{Type: "EDS", Version: namesVersion(s1.Resources[eds], []string{"c2"}), Nonce: "2", Names: []string{"c2"}}
	if d := cmp.Diff(want, viewSotW(t, r)); d != "" {
		t.Fatalf("EDS (-want +got):\n%s", d)
	}
	c.ack(r, "c2", "nope")
	e.waitStatus(t, "n1", "synced at 1", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 1 })

	// c1 changes: CDS (full set) is resent; EDS for c2 did not change and is not.
	s2 := mkSnap(t, 2, res{cds: {"c1": "b", "c2": "a"}, eds: {"c1": "b", "c2": "a"}})
	e.src.publish(s2)
	r = c.recv()
	want = sotwView{Type: "CDS", Version: s2.Version(cds), Nonce: "3", Names: []string{"c1", "c2"}}
	if d := cmp.Diff(want, viewSotW(t, r)); d != "" {
		t.Fatalf("CDS update (-want +got):\n%s", d)
	}
	c.ack(r)
	ps := e.waitStatus(t, "n1", "effective at 2", func(ps status.ProxyStatus) bool { return ps.EffectiveRevision == 2 })
	if ts := typeStatus(ps, eds); ts.Status != status.Synced || ts.RevisionAcked != 2 || ts.Nonce != "2" {
		t.Fatalf("EDS status = %+v, want SYNCED at revision 2 with nonce 2 (not resent)", ts)
	}
	// "nope" appears: EDS is sent with both names.
	s3 := mkSnap(t, 3, res{cds: {"c1": "b", "c2": "a"}, eds: {"c1": "b", "c2": "a", "nope": "x"}})
	e.src.publish(s3)
	r = c.recv()
	want = sotwView{Type: "EDS", Version: namesVersion(s3.Resources[eds], []string{"c2", "nope"}), Nonce: "4", Names: []string{"c2", "nope"}}
	if d := cmp.Diff(want, viewSotW(t, r)); d != "" {
		t.Fatalf("EDS after creation (-want +got):\n%s", d)
	}
}

func TestSotWNackIsRecordedAndNotResent(t *testing.T) {
	e := start(t, nil)
	s1 := mkSnap(t, 1, res{cds: {"c1": "good"}, eds: {"c1": "a"}})
	e.src.publish(s1)
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: cds})
	r1 := c.recv()
	c.ack(r1)
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"c1"}})
	c.ack(c.recv(), "c1")

	s2 := mkSnap(t, 2, res{cds: {"c1": "bad"}, eds: {"c1": "a"}})
	e.src.publish(s2)
	r2 := c.recv()
	if r2.TypeUrl != cds || r2.VersionInfo != s2.Version(cds) {
		t.Fatalf("got %s %s, want CDS %s", r2.TypeUrl, r2.VersionInfo, s2.Version(cds))
	}
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: cds, VersionInfo: r1.VersionInfo, ResponseNonce: r2.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "cluster c1: bad"}})
	ps := e.waitStatus(t, "n1", "NACKED", func(ps status.ProxyStatus) bool { return ps.Status == status.Nacked })
	want := status.TypeStatus{Type: "CDS", TypeURL: cds, Status: status.Nacked, VersionSent: s2.Version(cds), Nonce: r2.Nonce, RevisionSent: 2,
		VersionAcked: s1.Version(cds), RevisionAcked: 1, VersionRejected: s2.Version(cds), NonceRejected: r2.Nonce, Error: "cluster c1: bad"}
	if d := cmp.Diff(want, typeStatus(ps, cds)); d != "" {
		t.Fatalf("CDS status (-want +got):\n%s", d)
	}
	if ps.EffectiveRevision != 1 {
		t.Fatalf("effective = %d, want 1 (the last ACKed)", ps.EffectiveRevision)
	}
	// Revision 3 keeps the rejected CDS and changes EDS: only EDS goes out.
	s3 := mkSnap(t, 3, res{cds: {"c1": "bad"}, eds: {"c1": "b"}})
	e.src.publish(s3)
	r3 := c.recv()
	if r3.TypeUrl != eds {
		t.Fatalf("after NACK got %s %s; the rejected CDS version must not be resent", r3.TypeUrl, r3.VersionInfo)
	}
	c.ack(r3, "c1")
	// Revision 4 fixes the cluster: it converges.
	s4 := mkSnap(t, 4, res{cds: {"c1": "fixed"}, eds: {"c1": "b"}})
	e.src.publish(s4)
	r4 := c.recv()
	if r4.TypeUrl != cds || r4.VersionInfo != s4.Version(cds) {
		t.Fatalf("got %s %s, want CDS %s", r4.TypeUrl, r4.VersionInfo, s4.Version(cds))
	}
	c.ack(r4)
	e.waitStatus(t, "n1", "synced at 4", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 4 })
	if rs := e.tracker.Revision(4); !rs.Converged || rs.Effective != 1 {
		t.Fatalf("revision 4 = %+v, want converged", rs)
	}
}

func TestSotWStaleNonceIgnored(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{eds: {"a": "1", "b": "1"}}))
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: eds, ResourceNames: []string{"a"}})
	r1 := c.recv()
	e.src.publish(mkSnap(t, 2, res{eds: {"a": "2", "b": "1"}}))
	r2 := c.recv()
	// A request answering r1 (stale) that also asks for b is ignored entirely...
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: r1.Nonce, VersionInfo: r1.VersionInfo, ResourceNames: []string{"a", "b"}})
	// ...so the ACK of r2 with the same names is what adds b: the next response is
	// that answer, not one for the stale request.
	c.ack(r2, "a", "b")
	r3 := c.recv()
	if got := viewSotW(t, r3); got.Nonce != "3" || !cmp.Equal(got.Names, []string{"a", "b"}) {
		t.Fatalf("after stale request got %+v, want nonce 3 with a,b", got)
	}
	ps := e.waitStatus(t, "n1", "pending nonce 3", func(ps status.ProxyStatus) bool { return typeStatus(ps, eds).Nonce == "3" })
	if ts := typeStatus(ps, eds); ts.VersionAcked != r2.VersionInfo {
		t.Fatalf("acked = %q, want r2's %q (the stale answer changed nothing)", ts.VersionAcked, r2.VersionInfo)
	}
}

func TestSotWUnsubscribe(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{eds: {"a": "1", "b": "1"}}))
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: eds, ResourceNames: []string{"a", "b"}})
	r := c.recv()
	c.ack(r, "a") // accept and drop b
	e.waitStatus(t, "n1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })
	e.src.publish(mkSnap(t, 2, res{eds: {"a": "1", "b": "2"}}))
	e.src.publish(mkSnap(t, 3, res{eds: {"a": "3", "b": "2"}}))
	r = c.recv()
	if got := viewSotW(t, r); !cmp.Equal(got.Names, []string{"a"}) || got.Nonce != "2" {
		t.Fatalf("got %+v, want only a with nonce 2 (b's change is not sent)", got)
	}
	// Observed state never lags what the proxy holds: the response is pending in the
	// status the moment the proxy has it (no wait here).
	if ts := typeStatus(mustProxy(t, e, "n1"), eds); ts.Nonce != "2" {
		t.Fatalf("status shows EDS nonce %q after the proxy received nonce 2", ts.Nonce)
	}
	c.ack(r) // names empty now: unsubscribe everything (EDS has no wildcard)
	e.waitStatus(t, "n1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })
	e.src.publish(mkSnap(t, 4, res{eds: {"a": "4", "b": "4"}}))
	e.waitStatus(t, "n1", "unchanged at 4", func(ps status.ProxyStatus) bool { return typeStatus(ps, eds).RevisionSent == 4 })
	if ts := typeStatus(mustProxy(t, e, "n1"), eds); ts.Nonce != "2" {
		t.Fatalf("EDS nonce = %s after unsubscribing all; nothing should have been sent", ts.Nonce)
	}
}

func mustProxy(t *testing.T, e *env, id string) status.ProxyStatus {
	t.Helper()
	ps, err := e.tracker.Proxy(id)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestSotWPushOrderAndClusterRemovalLast(t *testing.T) {
	e := start(t, nil)
	s1 := mkSnap(t, 1, res{cds: {"old": "1"}, eds: {"old": "1"}, lds: {"l": "1"}, rds: {"r": "old"}})
	e.src.publish(s1)
	c := e.sotw(t)
	for i, req := range []*discoveryv3.DiscoveryRequest{
		{Node: nodeProto("n1"), TypeUrl: lds}, {TypeUrl: rds, ResourceNames: []string{"r"}},
		{TypeUrl: cds}, {TypeUrl: eds, ResourceNames: []string{"old", "new"}},
	} {
		c.send(req)
		r := c.recv()
		if r.TypeUrl != req.TypeUrl {
			t.Fatalf("request %d: got %s", i, r.TypeUrl)
		}
		c.ack(r, req.ResourceNames...)
	}
	// Route moves from cluster old to new: new cluster and its endpoints first,
	// then the route, and the old cluster is dropped last.
	s2 := mkSnap(t, 2, res{cds: {"new": "1"}, eds: {"new": "1"}, lds: {"l": "1"}, rds: {"r": "new"}})
	e.src.publish(s2)
	var got []sotwView
	for range 4 {
		got = append(got, viewSotW(t, c.recv()))
	}
	union := namesVersion(map[string]snapshot.Resource{"new": s2.Resources[cds]["new"], "old": s1.Resources[cds]["old"]}, []string{"new", "old"})
	want := []sotwView{
		{Type: "CDS", Version: union, Nonce: "5", Names: []string{"new", "old"}},
		{Type: "EDS", Version: namesVersion(s2.Resources[eds], []string{"new"}), Nonce: "6", Names: []string{"new"}},
		{Type: "RDS", Version: s2.Version(rds), Nonce: "7", Names: []string{"r"}},
		{Type: "CDS", Version: s2.Version(cds), Nonce: "8", Names: []string{"new"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("push order (-want +got):\n%s", d)
	}
}

func TestNodeIdentity(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	tests := []struct {
		name string
		reqs []*discoveryv3.DiscoveryRequest
		code codes.Code
		msg  string
	}{
		{"missing node", []*discoveryv3.DiscoveryRequest{{TypeUrl: cds}}, codes.InvalidArgument, "ads: first request: node.id is required"},
		{"bad metadata", []*discoveryv3.DiscoveryRequest{{TypeUrl: cds, Node: envoynode.ToProto((&node.Node{ID: "x", Namespace: "ns", Address: "not-an-ip"}))}}, codes.InvalidArgument,
			`ads: first request: node x: address: "not-an-ip" is not an IP literal`},
		{"id changes", []*discoveryv3.DiscoveryRequest{{TypeUrl: cds, Node: nodeProto("a")}, {TypeUrl: cds, Node: nodeProto("b")}}, codes.InvalidArgument,
			`ads: node.id changed on the stream from "a" to "b"`},
		{"no type", []*discoveryv3.DiscoveryRequest{{Node: nodeProto("a")}}, codes.InvalidArgument, "ads: request without type_url"},
		{"too many names", []*discoveryv3.DiscoveryRequest{{Node: nodeProto("a"), TypeUrl: eds, ResourceNames: names(101, "n")}}, codes.ResourceExhausted,
			"ads: node a: EDS requests 101 resource names, limit 100 over all types"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.sotw(t)
			for _, r := range tc.reqs {
				c.send(r)
			}
			err := c.endErr()
			if st, _ := grpcstatus.FromError(err); st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("err = %v, want %v %q", err, tc.code, tc.msg)
			}
		})
	}
}
