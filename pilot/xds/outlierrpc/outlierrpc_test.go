package outlierrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mesh = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, protocol: HTTP}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-1, namespace: shop, labels: {app: reviews}}
spec: {address: 10.0.0.3}
`

const reviews = "outbound|9080||reviews.shop.svc.cluster.local"

// sidecar opens one ADS stream as a Weft sidecar of node id would and waits
// until pilot has it synced.
func sidecar(t *testing.T, p *servertest.Pilot, id string, i int, rev int64) *servertest.Client {
	t.Helper()
	n := &node.Node{ID: id, Namespace: "shop", ServiceAccount: "web", Labels: map[string]string{"app": "web"},
		Address: fmt.Sprintf("127.0.1.%d", i+1), InboundPort: 15006}
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(n), Types: snapshot.PushOrder})
	p.WaitProxy(t, 10*time.Second, id, "synced", func(ps status.ProxyStatus) bool {
		return ps.EffectiveRevision >= rev && ps.Status == status.Synced
	})
	return c
}

func send(cc grpc.ClientConnInterface, r *outlierreport.Report) error {
	b, err := outlierreport.Encode(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return outlierreport.Send(ctx, cc, b)
}

func ejecting(id string, eps ...string) *outlierreport.Report {
	r := &outlierreport.Report{Node: id}
	for _, ep := range eps {
		r.Entries = append(r.Entries, outlierreport.Entry{Service: reviews, Endpoint: ep, Detector: outlierreport.Consecutive5xx, Age: time.Second, Times: 1})
	}
	r.Total = uint32(len(r.Entries))
	return r
}

func wantCode(t *testing.T, what string, err error, code codes.Code, text string) {
	t.Helper()
	if s, _ := grpcstatus.FromError(err); s.Code() != code || !strings.Contains(s.Message(), text) {
		t.Errorf("%s: %v; want %s containing %q", what, err, code, text)
	}
}

// Several fake sidecars on real gRPC connections to a real pilot: pilot counts
// how many eject each endpoint, of how many hold its service; entries vanish
// with their stream; reports that do not belong to a stream are refused.
func TestAggregatesOverRealStreams(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, mesh)
	const n = 5
	cs, ids := make([]*servertest.Client, n), make([]string, n)
	for i := range cs {
		ids[i] = fmt.Sprintf("web-%d", i)
		cs[i] = sidecar(t, p, ids[i], i, rev)
	}
	// Four of five eject 10.0.0.3:9080; the fifth reports nothing ejected.
	for i, c := range cs {
		r := ejecting(ids[i])
		if i < 4 {
			r = ejecting(ids[i], "10.0.0.3:9080")
		}
		if i == 0 {
			r = ejecting(ids[i], "10.0.0.3:9080", "10.0.0.4:9080")
		}
		if err := send(c.Conn(), r); err != nil {
			t.Fatalf("%s: %v", ids[i], err)
		}
	}
	v := p.Outliers(t)
	if v.Reporters != n || v.Entries != 5 || len(v.Endpoints) != 2 {
		t.Fatalf("view: %+v", v)
	}
	top := v.Endpoints[0]
	if top.Endpoint != "10.0.0.3:9080" || top.Service != reviews || top.EjectedBy != 4 || top.Clients != n ||
		top.Detectors["consecutive5xx"] != 4 || len(top.Nodes) != 4 || top.Since.IsZero() {
		t.Errorf("10.0.0.3:9080: %+v, want ejected by 4 of %d", top, n)
	}

	// Refused: a node pilot has no stream of; a node's report on another node's
	// connection; bytes that do not decode.
	wantCode(t, "unknown node", send(cs[0].Conn(), ejecting("nobody")), codes.FailedPrecondition, "outlier report of node nobody: no ADS stream of this node from this peer")
	wantCode(t, "other peer", send(cs[1].Conn(), ejecting(ids[0])), codes.FailedPrecondition, "no ADS stream of this node from this peer")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wantCode(t, "garbage", outlierreport.Send(ctx, cs[0].Conn(), []byte{outlierreport.Version, 0x81, 0}), codes.InvalidArgument, "not minimally")
	big := make([]byte, outlierreport.MaxReportBytes+1)
	big[0] = outlierreport.Version
	wantCode(t, "past the byte bound", outlierreport.Send(ctx, cs[0].Conn(), big), codes.InvalidArgument, "report is 32769 bytes, at most 32768")
	// Nothing refused changed the view.
	if v2 := p.Outliers(t); v2.Entries != 5 || v2.Endpoints[0].EjectedBy != 4 {
		t.Errorf("after refusals: %+v", v2)
	}

	// web-1's stream ends: its entries vanish and it is no longer a client.
	cs[1].Close()
	testkit.Wait(t, 10*time.Second, func() error {
		v := p.Outliers(t)
		if v.Reporters != n-1 || len(v.Endpoints) == 0 || v.Endpoints[0].EjectedBy != 3 || v.Endpoints[0].Clients != n-1 {
			return fmt.Errorf("after web-1 left: %+v", v)
		}
		return nil
	})
	// A report replaces the previous one whole: web-0 no longer ejects .4.
	if err := send(cs[0].Conn(), ejecting(ids[0], "10.0.0.3:9080")); err != nil {
		t.Fatal(err)
	}
	if v := p.Outliers(t); len(v.Endpoints) != 1 || v.Entries != 3 {
		t.Errorf("after web-0 replaced its report: %+v", v)
	}
	m := p.Metrics(t)
	for _, want := range []string{`weft_pilot_outlier_reports_total{result="accepted"} 6`, `weft_pilot_outlier_reports_total{result="unknown_node"} 2`,
		`weft_pilot_outlier_reports_total{result="invalid"} 2`, "weft_pilot_outlier_entries 3"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// The per-node rate: MaxReportsPerWindow reports in one window pass, one more
// is refused with ResourceExhausted, and another node is unaffected.
func TestRateOverGRPC(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, mesh)
	a, b := sidecar(t, p, "web-a", 0, rev), sidecar(t, p, "web-b", 1, rev)
	start := time.Now()
	for i := range outlierreport.MaxReportsPerWindow {
		if err := send(a.Conn(), ejecting("web-a")); err != nil {
			t.Fatalf("report %d: %v", i+1, err)
		}
	}
	err := send(a.Conn(), ejecting("web-a", "10.0.0.3:9080"))
	if time.Since(start) >= outlierreport.RateWindow {
		t.Skip("the window passed before the last report (machine too slow)")
	}
	wantCode(t, "one past the rate", err, codes.ResourceExhausted, "node web-a: outlier report rate exceeded: at most 10 reports per 10s")
	if err := send(b.Conn(), ejecting("web-b", "10.0.0.3:9080")); err != nil {
		t.Fatalf("another node: %v", err)
	}
	if v := p.Outliers(t); v.Entries != 1 || v.Endpoints[0].Nodes[0] != "web-b" {
		t.Errorf("view: %+v", v)
	}
}

// Pilot's total entries: a report that would take it past the bound is refused.
func TestEntriesBoundOverGRPC(t *testing.T) {
	lim := server.DefaultStatusLimits()
	lim.MaxOutlierEntries = 3
	p := servertest.Start(t, servertest.Options{Status: &lim})
	rev := p.Apply(t, mesh)
	a, b := sidecar(t, p, "web-a", 0, rev), sidecar(t, p, "web-b", 1, rev)
	if err := send(a.Conn(), ejecting("web-a", "10.0.0.3:9080", "10.0.0.4:9080")); err != nil {
		t.Fatal(err)
	}
	if err := send(b.Conn(), ejecting("web-b", "10.0.0.3:9080")); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	wantCode(t, "one past", send(b.Conn(), ejecting("web-b", "10.0.0.3:9080", "10.0.0.4:9080")), codes.ResourceExhausted,
		"pilot's outlier entries are full: its 2 entries would make 4, at most 3")
	if v := p.Outliers(t); v.Entries != 3 || v.MaxEntries != 3 {
		t.Errorf("view: %+v", v)
	}
}

// Over pilot's TLS listener a report is trusted by the SPIFFE ID of its
// sender: the node's own identity is accepted from any of its connections,
// another identity and a plaintext sender are refused.
func TestReportsTrustedByIdentity(t *testing.T) {
	var svc *ca.Service
	p := servertest.Start(t, servertest.Options{Secure: true, CA: func(_ context.Context, env server.AuthorityEnv) (server.Authority, error) {
		var err error
		svc, err = ca.New(ca.ServiceConfig{DataDir: env.DataDir, TrustDomain: env.TrustDomain, Logger: env.Logger})
		return svc, err
	}})
	rev := p.Apply(t, mesh)
	svid := func(sa string) credentials.TransportCredentials {
		tok, _, err := svc.IssueToken("shop", sa, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := proc.RequestSVID(t, p.XDSTLSAddr, svc.Bundle(), tok, "cluster.local", "shop", sa)
		return proc.ClientTLS(t, svc.Bundle(), "cluster.local", &c)
	}
	n := &node.Node{ID: "web-0", Namespace: "shop", ServiceAccount: "web", Labels: map[string]string{"app": "web"}, Address: "127.0.1.1", InboundPort: 15006}
	own := servertest.Dial(t, p.XDSTLSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(n), Types: snapshot.PushOrder, Creds: svid("web")})
	p.WaitProxy(t, 10*time.Second, "web-0", "synced", func(ps status.ProxyStatus) bool { return ps.EffectiveRevision >= rev && ps.Status == status.Synced })
	if err := send(own.Conn(), ejecting("web-0", "10.0.0.3:9080")); err != nil {
		t.Fatalf("on its own stream's connection: %v", err)
	}
	dial := func(addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	// Another connection, a new certificate, the same identity: accepted.
	if err := send(dial(p.XDSTLSAddr, svid("web")), ejecting("web-0", "10.0.0.3:9080")); err != nil {
		t.Fatalf("same identity, other connection: %v", err)
	}
	wantCode(t, "another identity", send(dial(p.XDSTLSAddr, svid("ratings")), ejecting("web-0", "10.0.0.4:9080")), codes.FailedPrecondition,
		"outlier report of node web-0 from spiffe://cluster.local/ns/shop/sa/ratings: no ADS stream of this node from this peer")
	wantCode(t, "plaintext", send(dial(p.XDSAddr, insecure.NewCredentials()), ejecting("web-0", "10.0.0.4:9080")), codes.FailedPrecondition,
		"no ADS stream of this node from this peer")
	if v := p.Outliers(t); v.Entries != 1 || v.Endpoints[0].Endpoint != "10.0.0.3:9080" {
		t.Errorf("view: %+v", v)
	}
}
