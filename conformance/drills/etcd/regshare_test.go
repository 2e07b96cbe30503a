package etcd

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// edsAddrs is the endpoint addresses of cluster in c's latest EDS response.
func edsAddrs(c *servertest.Client, cluster string) ([]string, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	var last *servertest.Response
	for _, r := range c.Responses() {
		if r.TypeURL == snapshot.EndpointType {
			last = &r
		}
	}
	if last == nil {
		return nil, fmt.Errorf("no EDS response yet")
	}
	v, ok := last.Values[cluster]
	if !ok {
		return nil, fmt.Errorf("EDS response %s has no %s", last.Version, cluster)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(v, &cla); err != nil {
		return nil, err
	}
	var out []string
	for _, g := range cla.Endpoints {
		for _, e := range g.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return out, nil
}

// TestRegistrationAcrossPilotReplicas: two bin/pilot replicas on one etcd. A
// sidecar registers (authenticated ADS, workload certificate) through replica
// B only; a client connected to replica A only gets it as an endpoint of the
// Service its labels select. B is SIGKILLed: the registration leaves A's EDS
// within its lease (regTTL, set by --etcd-registration-ttl) plus etcd's
// lease slack and the registration debounce.
func TestRegistrationAcrossPilotReplicas(t *testing.T) {
	const regTTL = 3 * time.Second // short, so the drill does not wait the 10 s default
	c := etcdtest.Start(t, etcdtest.Options{})
	flags := append(sharedCAFlags(t, c), "--etcd-registration-ttl", regTTL.String())
	a := proc.StartPilot(t, "127.93.8.1", filepath.Join(t.TempDir(), "a"), flags...)
	b := proc.StartPilot(t, "127.93.8.2", filepath.Join(t.TempDir(), "b"), flags...)
	a.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
`)
	roots := b.CARoot(t)
	cert := b.SVID(t, "shop", "reviews")
	reg := &node.Node{ID: "reviews-on-b", Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
		Address: "127.93.8.10", InboundPort: 15006}
	servertest.Dial(t, b.XDSTLSAddr(), servertest.ClientOptions{Node: envoynode.ToProto(reg), Types: []string{snapshot.ClusterType},
		Creds: proc.ClientTLS(t, roots, "cluster.local", &cert)})
	cluster := ir.OutboundClusterName(9080, "", ir.ServiceHost("reviews", "shop", "cluster.local"))
	reader := &node.Node{ID: "reader-on-a", Namespace: "shop", ServiceAccount: "productpage"}
	client := servertest.Dial(t, a.XDSAddr(), servertest.ClientOptions{Node: envoynode.ToProto(reader),
		Types: []string{snapshot.EndpointType}, Names: map[string][]string{snapshot.EndpointType: {cluster}}})
	want := "127.93.8.10:15006"
	testkit.Wait(t, 30*time.Second, func() error {
		got, err := edsAddrs(client, cluster)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != want {
			return fmt.Errorf("replica A's EDS for %s: %v, want [%s] (registered through B)", cluster, got, want)
		}
		return nil
	})
	t.Logf("a sidecar registered through replica B is in the EDS replica A serves: %s", want)
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	bound := regTTL + 2*etcdtest.ElectionTimeout + 2*time.Second
	testkit.Wait(t, bound+10*time.Second, func() error {
		got, err := edsAddrs(client, cluster)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("replica A's EDS for %s after B was killed: %v", cluster, got)
		}
		return nil
	})
	gone := time.Since(killed)
	t.Logf("replica B SIGKILLed: its sidecar left replica A's EDS %.1fs later (lease TTL %s, bound asserted %s)", gone.Seconds(), regTTL, bound)
	if gone > bound {
		t.Errorf("the killed replica's registration stayed %s in A's EDS, want at most %s", gone, bound)
	}
}
