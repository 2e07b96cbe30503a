package status

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// TestGenError: a snapshot pilot refused to send shows on the proxy and rejects
// its revision (rollout status fails naming it); clearing it leaves the proxy
// pending; an unknown node is ignored.
func TestGenError(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	cds := snapshot.ClusterType
	c := tr.Connect(&node.Node{ID: "p"}, t0)
	c.Sent(Sent{Type: cds, Version: "v4", Nonce: "1", Revision: 4, Snapshot: snap(t, 4, "a")}, t0)
	c.Acked(cds, "1", t0)
	tr.GenError("nobody", 5, "ignored")

	tr.GenError("p", 5, "CDS \"a\": bad")
	ps, err := tr.Proxy("p")
	if err != nil || ps.GenError != "CDS \"a\": bad" || ps.GenErrorRevision != 5 || ps.EffectiveRevision != 4 {
		t.Fatalf("proxy %+v %v, want the generation error at 5, effective 4", ps, err)
	}
	want := RevisionStatus{Revision: 5, Connected: 1, Rejected: 1,
		Rejections: []Rejection{{Node: "p", Type: GenerationType, Error: "CDS \"a\": bad"}}}
	if d := cmp.Diff(want, tr.Revision(5)); d != "" {
		t.Fatalf("revision 5 (-want +got):\n%s", d)
	}
	if got := tr.Revision(4); !got.Converged || got.Rejected != 0 {
		t.Fatalf("revision 4 %+v, want converged", got)
	}

	tr.GenError("p", 6, "")
	ps, _ = tr.Proxy("p")
	if ps.GenError != "" || ps.GenErrorRevision != 0 {
		t.Fatalf("cleared: %+v", ps)
	}
	if got := tr.Revision(5); got.Rejected != 0 || got.Pending != 1 {
		t.Fatalf("revision 5 after clearing %+v, want pending", got)
	}
}

func TestTypeNames(t *testing.T) {
	tests := []struct{ url, want string }{
		{snapshot.ClusterType, "CDS"}, {snapshot.EndpointType, "EDS"}, {snapshot.ListenerType, "LDS"},
		{snapshot.RouteType, "RDS"}, {snapshot.SecretType, "SDS"}, {snapshot.StalenessType, "STALENESS"},
		{snapshot.ManifestType, "MANIFEST"}, {"type.googleapis.com/x.Y", "other"},
	}
	for _, tt := range tests {
		if got := TypeName(tt.url); got != tt.want {
			t.Errorf("TypeName(%s) = %s, want %s", tt.url, got, tt.want)
		}
	}
	// Every served type is listed once, in push order.
	types := map[string]*typeRec{"type.googleapis.com/x.Y": {}}
	for _, typ := range snapshot.PushOrder {
		types[typ] = &typeRec{}
	}
	want := append(append([]string(nil), snapshot.PushOrder...), "type.googleapis.com/x.Y")
	if d := cmp.Diff(want, orderedTypes(types)); d != "" {
		t.Errorf("orderedTypes (-want +got):\n%s", d)
	}
}
