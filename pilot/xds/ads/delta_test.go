package ads

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/weft-mesh/weft/pilot/status"
)

func TestDeltaWildcardUpdatesAndRemovals(t *testing.T) {
	e := start(t, nil)
	s1 := mkSnap(t, 1, res{cds: {"a": "1", "b": "1", "c": "1"}})
	e.src.publish(s1)
	c := e.delta(t)
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("n1"), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
	r := c.recv()
	want := deltaView{Type: "CDS", Nonce: "1", Res: map[string]string{"a": ver(s1, cds, "a"), "b": ver(s1, cds, "b"), "c": ver(s1, cds, "c")}}
	if d := cmp.Diff(want, viewDelta(r)); d != "" {
		t.Fatalf("initial (-want +got):\n%s", d)
	}
	if r.SystemVersionInfo != s1.Version(cds) {
		t.Fatalf("system_version_info = %q, want %q", r.SystemVersionInfo, s1.Version(cds))
	}
	c.ack(r)
	e.waitStatus(t, "n1", "synced at 1", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 1 })

	// a changes, c is deleted, d is added: one response with a and d, then one
	// with the removal.
	s2 := mkSnap(t, 2, res{cds: {"a": "2", "b": "1", "d": "1"}})
	e.src.publish(s2)
	got := []deltaView{viewDelta(c.recv()), viewDelta(c.recv())}
	wantSeq := []deltaView{
		{Type: "CDS", Nonce: "2", Res: map[string]string{"a": ver(s2, cds, "a"), "d": ver(s2, cds, "d")}},
		{Type: "CDS", Nonce: "3", Res: map[string]string{}, Removed: []string{"c"}},
	}
	if d := cmp.Diff(wantSeq, got); d != "" {
		t.Fatalf("update (-want +got):\n%s", d)
	}
	// The ACK of nonce 2 is stale once 3 is out: still pending until 3 is ACKed.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: "2"})
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: "3"})
	e.waitStatus(t, "n1", "synced at 2", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 2 })
	// A revision that changes nothing for this proxy sends nothing but moves its
	// effective revision.
	e.src.publish(mkSnap(t, 3, res{cds: {"a": "2", "b": "1", "d": "1"}}))
	ps := e.waitStatus(t, "n1", "effective at 3", func(ps status.ProxyStatus) bool { return ps.EffectiveRevision == 3 })
	if ts := typeStatus(ps, cds); ts.Nonce != "3" || ts.Status != status.Synced {
		t.Fatalf("CDS = %+v, want nonce 3 SYNCED (nothing sent)", ts)
	}
}

func TestDeltaExplicitNonExistentAndUnsubscribe(t *testing.T) {
	e := start(t, nil)
	s1 := mkSnap(t, 1, res{eds: {"a": "1", "b": "1"}})
	e.src.publish(s1)
	c := e.delta(t)
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("n1"), TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "ghost"}})
	got := []deltaView{viewDelta(c.recv()), viewDelta(c.recv())}
	want := []deltaView{
		{Type: "EDS", Nonce: "1", Res: map[string]string{"a": ver(s1, eds, "a")}},
		{Type: "EDS", Nonce: "2", Res: map[string]string{}, Removed: []string{"ghost"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("initial (-want +got):\n%s", d)
	}
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "2"})
	// Subscribe to b (exists, answered even though nothing changed) and drop a.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b"}, ResourceNamesUnsubscribe: []string{"a"}})
	r := c.recv()
	if d := cmp.Diff(deltaView{Type: "EDS", Nonce: "3", Res: map[string]string{"b": ver(s1, eds, "b")}}, viewDelta(r)); d != "" {
		t.Fatalf("subscribe b (-want +got):\n%s", d)
	}
	c.ack(r)
	e.waitStatus(t, "n1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })
	// a changes (unsubscribed: not sent), ghost appears (subscribed: sent).
	s2 := mkSnap(t, 2, res{eds: {"a": "2", "b": "1", "ghost": "1"}})
	e.src.publish(s2)
	if d := cmp.Diff(deltaView{Type: "EDS", Nonce: "4", Res: map[string]string{"ghost": ver(s2, eds, "ghost")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("ghost appears (-want +got):\n%s", d)
	}
	// ghost disappears again: reported removed once.
	e.src.publish(mkSnap(t, 3, res{eds: {"a": "3", "b": "1"}}))
	if d := cmp.Diff(deltaView{Type: "EDS", Nonce: "5", Res: map[string]string{}, Removed: []string{"ghost"}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("ghost removed (-want +got):\n%s", d)
	}
}

func TestDeltaInitialResourceVersions(t *testing.T) {
	e := start(t, nil)
	s := mkSnap(t, 5, res{cds: {"same": "1", "changed": "2", "new": "1"}, eds: {"same": "1", "changed": "2"}})
	e.src.publish(s)
	tests := []struct {
		name string
		req  *discoveryv3.DeltaDiscoveryRequest
		want []deltaView
	}{
		{"wildcard reconnect", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: map[string]string{"same": ver(s, cds, "same"), "changed": "old", "deleted": "x"}},
			[]deltaView{
				{Type: "CDS", Nonce: "1", Res: map[string]string{"changed": ver(s, cds, "changed"), "new": ver(s, cds, "new")}},
				{Type: "CDS", Nonce: "2", Res: map[string]string{}, Removed: []string{"deleted"}},
			}},
		{"explicit reconnect", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"same", "changed", "deleted", "ghost"},
			InitialResourceVersions: map[string]string{"same": ver(s, eds, "same"), "changed": "old", "deleted": "x"}},
			[]deltaView{
				{Type: "EDS", Nonce: "1", Res: map[string]string{"changed": ver(s, eds, "changed")}},
				{Type: "EDS", Nonce: "2", Res: map[string]string{}, Removed: []string{"deleted", "ghost"}},
			}},
		{"everything current: nothing sent but the empty wildcard answer", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: map[string]string{"same": ver(s, cds, "same"), "changed": ver(s, cds, "changed"), "new": ver(s, cds, "new")}},
			[]deltaView{{Type: "CDS", Nonce: "1", Res: map[string]string{}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.delta(t)
			tc.req.Node = nodeProto("n-" + tc.name)
			c.send(tc.req)
			var got []deltaView
			for range tc.want {
				got = append(got, viewDelta(c.recv()))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestDeltaNackNotResent(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"a": "1"}, eds: {"a": "1"}}))
	c := e.delta(t)
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("n1"), TypeUrl: cds, ResourceNamesSubscribe: []string{"*"}})
	c.ack(c.recv())
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	c.ack(c.recv())
	e.waitStatus(t, "n1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 1 })
	s2 := mkSnap(t, 2, res{cds: {"a": "bad"}, eds: {"a": "1"}})
	e.src.publish(s2)
	r := c.recv()
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: r.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster a: bad"}})
	ps := e.waitStatus(t, "n1", "nacked", func(ps status.ProxyStatus) bool { return ps.Status == status.Nacked })
	if ts := typeStatus(ps, cds); ts.Error != "cluster a: bad" || ts.VersionRejected != s2.Version(cds) || ts.NonceRejected != r.Nonce || ps.EffectiveRevision != 1 {
		t.Fatalf("status = %+v effective %d", ts, ps.EffectiveRevision)
	}
	// Revision 3: same bad cluster, new endpoints: only EDS is sent.
	s3 := mkSnap(t, 3, res{cds: {"a": "bad"}, eds: {"a": "2"}})
	e.src.publish(s3)
	if d := cmp.Diff(deltaView{Type: "EDS", Nonce: "4", Res: map[string]string{"a": ver(s3, eds, "a")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("after NACK (-want +got):\n%s", d)
	}
	s4 := mkSnap(t, 4, res{cds: {"a": "good"}, eds: {"a": "2"}})
	e.src.publish(s4)
	r = c.recv()
	if d := cmp.Diff(deltaView{Type: "CDS", Nonce: "5", Res: map[string]string{"a": ver(s4, cds, "a")}}, viewDelta(r)); d != "" {
		t.Fatalf("fix (-want +got):\n%s", d)
	}
	c.ack(r)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "4"})
	e.waitStatus(t, "n1", "synced at 4", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced && ps.EffectiveRevision == 4 })
}

func TestDeltaPushOrder(t *testing.T) {
	e := start(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"old": "1"}, eds: {"old": "1"}, lds: {"l-old": "1"}, rds: {"r-old": "1"}}))
	c := e.delta(t)
	for i, typ := range []string{lds, rds, cds, eds} {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"*"}}
		if i == 0 {
			req.Node = nodeProto("n1")
		}
		c.send(req)
		c.ack(c.recv())
	}
	e.waitStatus(t, "n1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })
	s2 := mkSnap(t, 2, res{cds: {"new": "1"}, eds: {"new": "1"}, lds: {"l-new": "1"}, rds: {"r-new": "1"}})
	e.src.publish(s2)
	var got []deltaView
	for range 8 {
		got = append(got, viewDelta(c.recv()))
	}
	none := map[string]string{}
	want := []deltaView{
		{Type: "CDS", Nonce: "5", Res: map[string]string{"new": ver(s2, cds, "new")}},
		{Type: "EDS", Nonce: "6", Res: map[string]string{"new": ver(s2, eds, "new")}},
		{Type: "LDS", Nonce: "7", Res: map[string]string{"l-new": ver(s2, lds, "l-new")}},
		{Type: "RDS", Nonce: "8", Res: map[string]string{"r-new": ver(s2, rds, "r-new")}},
		{Type: "RDS", Nonce: "9", Res: none, Removed: []string{"r-old"}},
		{Type: "LDS", Nonce: "10", Res: none, Removed: []string{"l-old"}},
		{Type: "EDS", Nonce: "11", Res: none, Removed: []string{"old"}},
		{Type: "CDS", Nonce: "12", Res: none, Removed: []string{"old"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("order (-want +got):\n%s", d)
	}
}

func TestDeltaWildcardSubscriptionChanges(t *testing.T) {
	e := start(t, nil)
	s := mkSnap(t, 1, res{cds: {"a": "1", "b": "1"}})
	e.src.publish(s)
	c := e.delta(t)
	// Legacy wildcard (first request names nothing) plus explicit a later.
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("n1"), TypeUrl: cds})
	c.ack(c.recv())
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a"}})
	// Subscribing to a resource the client already has is still answered.
	if d := cmp.Diff(deltaView{Type: "CDS", Nonce: "2", Res: map[string]string{"a": ver(s, cds, "a")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("explicit a (-want +got):\n%s", d)
	}
	// Unsubscribing a while the wildcard still covers it must be answered too.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesUnsubscribe: []string{"a"}})
	if d := cmp.Diff(deltaView{Type: "CDS", Nonce: "3", Res: map[string]string{"a": ver(s, cds, "a")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("unsubscribe a under wildcard (-want +got):\n%s", d)
	}
	// Leaving the wildcard: later changes are not sent.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesUnsubscribe: []string{"*"}, ResourceNamesSubscribe: []string{"b"}})
	if d := cmp.Diff(deltaView{Type: "CDS", Nonce: "4", Res: map[string]string{"b": ver(s, cds, "b")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("explicit b (-want +got):\n%s", d)
	}
	s2 := mkSnap(t, 2, res{cds: {"a": "2", "b": "2"}})
	e.src.publish(s2)
	if d := cmp.Diff(deltaView{Type: "CDS", Nonce: "5", Res: map[string]string{"b": ver(s2, cds, "b")}}, viewDelta(c.recv())); d != "" {
		t.Fatalf("after leaving wildcard (-want +got):\n%s", d)
	}
}
