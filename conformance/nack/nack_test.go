// Package nack is the NACK drill: a proxy rejects a version pilot sends. Pilot
// must show it NACKED with the proxy's error (meshctl proxy-status), fail
// meshctl rollout status --wait at once naming the proxy and the error, never
// resend the rejected version (even while other types keep changing), keep the
// stream up, and converge on the next valid revision.
package nack

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/meshctl"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	good = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, protocol: HTTP}
`
	// bad is a Service whose cluster the drill's strict client refuses.
	bad = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: forbidden, namespace: shop}
spec:
  selector: {app: forbidden}
  ports:
  - {name: http, port: 8080, protocol: HTTP}
`
	workload = `apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-%d, namespace: shop, labels: {app: reviews}}
spec: {address: 127.0.0.%d}
`
	badCluster = "outbound|8080||forbidden.shop.svc.cluster.local"
	nodeID     = "strict-client"
	// noResendWindow is how long after the NACK (while other types keep
	// changing) no response may carry the rejected cluster again.
	noResendWindow = time.Second
)

var types = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType, snapshot.RouteType}

// strict rejects any CDS response that carries badCluster.
func strict(r servertest.Response) error {
	if _, ok := r.Names[badCluster]; ok && r.TypeURL == snapshot.ClusterType {
		return fmt.Errorf("cluster %s: refused by the drill's strict client policy", badCluster)
	}
	return nil
}

func meshctlRun(p *servertest.Pilot, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := meshctl.Run(ctx, append([]string{"--pilot", p.AdminURL}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestNACKDrill(t *testing.T) {
	for _, tt := range []struct {
		name  string
		delta bool
	}{{"sotw", false}, {"delta", true}} {
		t.Run(tt.name, func(t *testing.T) { drill(t, tt.delta) })
	}
}

func drill(t *testing.T, delta bool) {
	p := servertest.Start(t, servertest.Options{})
	rev1 := p.Apply(t, good)
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: delta, Node: envoynode.ToProto((&node.Node{ID: nodeID})), Types: types, Judge: strict})
	rollout := func(rev int64) (int, string, string) {
		return meshctlRun(p, "rollout", "status", strconv.FormatInt(rev, 10), "--wait", "--timeout", "10s")
	}
	p.WaitProxy(t, 10*time.Second, nodeID, "connected", func(status.ProxyStatus) bool { return true })
	if code, out, errOut := rollout(rev1); code != meshctl.ExitOK {
		t.Fatalf("first revision: rollout status exit %d\n%s%s", code, out, errOut)
	}

	// The bad revision: CDS is NACKed.
	rev2 := p.Apply(t, bad)
	code, out, errOut := rollout(rev2)
	wantErr := "meshctl: revision " + strconv.FormatInt(rev2, 10) + " rejected by 1 of 1 proxies: " + nodeID +
		" rejected CDS: cluster " + badCluster + ": refused by the drill's strict client policy\n"
	if code != meshctl.ExitInvalid || errOut != wantErr || !strings.Contains(out, "rejected: 1\n  "+nodeID+" CDS version ") {
		t.Fatalf("rollout status of the rejected revision: exit %d\nstdout:\n%s\nstderr %q\nwant exit 1, stderr %q", code, out, errOut, wantErr)
	}
	nackAt := time.Now()
	ps, _ := p.Proxy(t, nodeID)
	var cds status.TypeStatus
	for _, ts := range ps.Types {
		if ts.Type == "CDS" {
			cds = ts
		}
	}
	if cds.Status != status.Nacked || cds.Error != "cluster "+badCluster+": refused by the drill's strict client policy" || cds.VersionRejected == "" {
		t.Fatalf("CDS status %+v, want NACKED with the client's error", cds)
	}
	if code, out, errOut := meshctlRun(p, "proxy-status"); code != 0 ||
		!strings.Contains(out, nodeID+"  NACKED") ||
		!strings.Contains(out, nodeID+" CDS NACKED version "+cds.VersionRejected+": cluster "+badCluster+": refused by the drill's strict client policy") {
		t.Fatalf("proxy-status exit %d:\n%s%s", code, out, errOut)
	}

	// Other types keep changing (new endpoints); the rejected CDS is never resent.
	for i := range 3 {
		at := time.Now()
		p.Apply(t, good+"---\n"+fmt.Sprintf(workload, i, 10+i))
		testkit.Eventually(t, 10*time.Second, "an EDS push after the workload change", func() bool {
			for _, r := range c.Responses() {
				if r.TypeURL == snapshot.EndpointType && r.At.After(at) {
					return true
				}
			}
			return false
		})
	}
	// Absence can only be shown over a window: give a resend every chance to happen.
	time.Sleep(noResendWindow)
	resent := 0
	edsAfter := 0
	for _, r := range c.Responses() {
		if r.At.Before(nackAt) {
			continue
		}
		if _, ok := r.Names[badCluster]; ok && r.TypeURL == snapshot.ClusterType {
			resent++
		}
		if r.TypeURL == snapshot.EndpointType {
			edsAfter++
		}
	}
	if resent != 0 {
		t.Errorf("pilot resent the rejected cluster %d times after the NACK", resent)
	}
	if edsAfter == 0 {
		t.Errorf("no EDS push reached the client after the NACK: the window proved nothing")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("stream ended after the NACK: %v", err)
	}

	// The next valid revision (the bad service removed) converges on the same stream.
	rev4 := p.Delete(t, "services", "shop", "forbidden")
	if code, out, errOut := rollout(rev4); code != meshctl.ExitOK {
		t.Fatalf("valid revision after the NACK: rollout status exit %d\n%s%s", code, out, errOut)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("stream ended: %v", err)
	}
	t.Logf("%d responses on one stream; rejected version %s never resent", len(c.Responses()), cds.VersionRejected)
}
