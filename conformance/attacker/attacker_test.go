// Package attacker replays issue #9's attacks on a real bin/pilot started with
// default flags (proc.Secure(): no --insecure-plaintext-registration), with raw
// ADS clients over grpc-go: an unauthenticated or mismatched registration is
// refused and never becomes an endpoint; a node id cannot be taken over without
// its identity (and the holder is undisturbed), while the same identity
// reclaims it; hostile nodes (a 1 MiB id, 50,000 labels) are refused; and
// 2,000 hostile read-only streams leave pilot's RSS under a stated bound.
package attacker

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// Loopback addresses of this package (other packages use others): pilot, and
// the /16 hostile clients dial from.
const (
	pilotIP    = "127.91.0.1"
	reviewsEDS = "outbound|9080||reviews.shop.svc.cluster.local"
	mesh       = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
`
)

func startPilot(t *testing.T, extra ...string) *proc.PilotProcess {
	t.Helper()
	p := proc.StartPilot(t, pilotIP, t.TempDir(), append([]string{proc.Secure()}, extra...)...)
	p.Apply(t, mesh)
	return p
}

// stream is one raw SotW ADS stream that ACKs everything and keeps what it
// was last sent per type.
type stream struct {
	cc     *grpc.ClientConn
	s      discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	err  error
	last map[string]*discoveryv3.DiscoveryResponse
}

func dialStream(t testing.TB, addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) *stream {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &stream{cc: cc, cancel: cancel, done: make(chan struct{}), last: map[string]*discoveryv3.DiscoveryResponse{}}
	t.Cleanup(st.close)
	// A refused handshake ends the stream before it starts.
	if st.s, st.err = discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx); st.err != nil {
		close(st.done)
	}
	return st
}

// open sends the first requests (n on the first) and starts answering.
func (st *stream) open(t testing.TB, n *node.Node, types []string, names map[string][]string) *stream {
	t.Helper()
	if st.s == nil {
		return st
	}
	for i, typ := range types {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ, ResourceNames: names[typ]}
		if i == 0 {
			req.Node = envoynode.ToProto(n)
		}
		if err := st.s.Send(req); err != nil {
			break // the server ended the stream: Recv says why
		}
	}
	go st.loop(names)
	return st
}

func (st *stream) loop(names map[string][]string) {
	defer close(st.done)
	for {
		r, err := st.s.Recv()
		if err != nil {
			st.mu.Lock()
			st.err = err
			st.mu.Unlock()
			return
		}
		st.mu.Lock()
		st.last[r.TypeUrl] = r
		st.mu.Unlock()
		_ = st.s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names[r.TypeUrl]})
	}
}

func (st *stream) close() {
	st.cancel()
	_ = st.cc.Close()
}

// ended waits for the stream to end and returns "Code: message".
func (st *stream) ended(t testing.TB) string {
	t.Helper()
	select {
	case <-st.done:
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after 10s")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	s, _ := grpcstatus.FromError(st.err)
	return s.Code().String() + ": " + s.Message()
}

func (st *stream) alive() bool {
	select {
	case <-st.done:
		return false
	default:
		return true
	}
}

// endpoints are the addresses of cluster's EDS in the latest response.
func (st *stream) endpoints(t testing.TB, cluster string) []string {
	t.Helper()
	st.mu.Lock()
	r := st.last[snapshot.EndpointType]
	st.mu.Unlock()
	var out []string
	for _, a := range r.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
			t.Fatal(err)
		}
		if cla.GetClusterName() != cluster {
			continue
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	sort.Strings(out)
	return out
}

// reader is a plain xDS client (no Weft metadata) reading reviews' endpoints
// over plaintext: what every proxy in the mesh is told.
func reader(t *testing.T, p *proc.PilotProcess, id string) *stream {
	return dialStream(t, p.XDSAddr(), insecure.NewCredentials()).open(t, &node.Node{ID: id},
		[]string{snapshot.EndpointType}, map[string][]string{snapshot.EndpointType: {reviewsEDS}})
}

func sidecarNode(id, ns, sa, addr string) *node.Node {
	return &node.Node{ID: id, Namespace: ns, ServiceAccount: sa, Address: addr, InboundPort: 15006, Labels: map[string]string{"app": "reviews"}}
}

var sidecarTypes = []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.ListenerType}

// mtls is a client with a certificate pilot issued for ns/sa.
func mtls(t *testing.T, p *proc.PilotProcess, ns, sa string) credentials.TransportCredentials {
	t.Helper()
	c := p.SVID(t, ns, sa)
	return proc.ClientTLS(t, p.CARoot(t), "cluster.local", &c)
}

func waitEndpoints(t *testing.T, r *stream, want []string) {
	t.Helper()
	testkit.Wait(t, 10*time.Second, func() error {
		if got := r.endpoints(t, reviewsEDS); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("EDS of %s: %v, want %v", reviewsEDS, got, want)
		}
		return nil
	})
}

func wantEnded(t *testing.T, st *stream, prefix string) {
	t.Helper()
	if got := st.ended(t); !strings.HasPrefix(got, prefix) {
		t.Fatalf("stream ended with\n  %s\nwant\n  %s...", got, prefix)
	}
}

// The first finding: a raw ADS client claiming namespace shop and
// app=reviews became an endpoint of reviews. Now it is refused (plaintext, TLS
// without a certificate, a certificate of another namespace or service
// account), and only the sidecar whose certificate says shop/reviews is one.
func TestRegistrationNeedsTheIdentity(t *testing.T) {
	p := startPilot(t)
	r := reader(t, p, "reader")
	attempts := []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
		n     *node.Node
		want  string
	}{
		{"plaintext", p.XDSAddr(), insecure.NewCredentials(), sidecarNode("evil-1", "shop", "reviews", "10.66.0.1"),
			`PermissionDenied: ads: node evil-1: registration as a workload of namespace "shop" refused: unauthenticated peer 127.0.0.1:`},
		{"TLS without a certificate", p.XDSTLSAddr(), proc.ClientTLS(t, p.CARoot(t), "cluster.local", nil), sidecarNode("evil-2", "shop", "reviews", "10.66.0.2"),
			`PermissionDenied: ads: node evil-2: registration as a workload of namespace "shop" refused: unauthenticated peer 127.0.0.1:`},
		{"certificate of another namespace", p.XDSTLSAddr(), mtls(t, p, "evil", "reviews"), sidecarNode("evil-3", "shop", "reviews", "10.66.0.3"),
			`PermissionDenied: ads: node evil-3: metadata namespace "shop" disagrees with the client certificate's "evil" (spiffe://cluster.local/ns/evil/sa/reviews)`},
		{"certificate of another service account", p.XDSTLSAddr(), mtls(t, p, "shop", "ratings"), sidecarNode("evil-4", "shop", "reviews", "10.66.0.4"),
			`PermissionDenied: ads: node evil-4: metadata serviceAccount "reviews" disagrees with the client certificate's "ratings" (spiffe://cluster.local/ns/shop/sa/ratings)`},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			wantEnded(t, dialStream(t, a.addr, a.creds).open(t, a.n, sidecarTypes, nil), a.want)
		})
	}
	// The real sidecar registers; the reader sees it and only it.
	real := dialStream(t, p.XDSTLSAddr(), mtls(t, p, "shop", "reviews")).open(t, sidecarNode("reviews-1", "shop", "reviews", "10.0.0.3"), sidecarTypes, nil)
	waitEndpoints(t, r, []string{"10.0.0.3"})
	if !real.alive() || !r.alive() {
		t.Fatal("a stream ended")
	}
	if ps := proxyStatus(t, p, "evil-1"); ps != "" {
		t.Fatalf("pilot tracks the refused node: %s", ps)
	}
}

// proxyStatus is pilot's status of node id ("" when it has none).
func proxyStatus(t *testing.T, p *proc.PilotProcess, id string) string {
	t.Helper()
	ps, err := p.ProxyStatus(id)
	if err != nil {
		return ""
	}
	return string(ps.Status)
}

// The second finding: a second connection claiming an existing node id
// replaced the real sidecar. Now a claim without the holder's identity is
// refused and the real stream keeps its endpoint and its CONNECTED status (also
// after the impostor leaves); the same identity's new stream replaces the old
// one (a sidecar's reconnect), and pilot does not then call it DISCONNECTED.
func TestNodeIDTakeover(t *testing.T) {
	p := startPilot(t)
	r := reader(t, p, "reader")
	real := dialStream(t, p.XDSTLSAddr(), mtls(t, p, "shop", "reviews")).open(t, sidecarNode("reviews-1", "shop", "reviews", "10.0.0.3"), sidecarTypes, nil)
	waitEndpoints(t, r, []string{"10.0.0.3"})
	waitStatus(t, p, "reviews-1", "SYNCED")

	for _, imp := range []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
		n     *node.Node
	}{
		{"another identity", p.XDSTLSAddr(), mtls(t, p, "shop", "ratings"), sidecarNode("reviews-1", "shop", "ratings", "10.66.0.9")},
		{"plaintext reader", p.XDSAddr(), insecure.NewCredentials(), &node.Node{ID: "reviews-1"}},
		{"TLS reader without a certificate", p.XDSTLSAddr(), proc.ClientTLS(t, p.CARoot(t), "cluster.local", nil), &node.Node{ID: "reviews-1"}},
	} {
		t.Run(imp.name, func(t *testing.T) {
			st := dialStream(t, imp.addr, imp.creds).open(t, imp.n, sidecarTypes, nil)
			wantEnded(t, st, `AlreadyExists: ads: node id "reviews-1" is held by another stream of another identity;`)
		})
	}
	if !real.alive() {
		t.Fatalf("the real stream ended: %s", real.ended(t))
	}
	waitStatus(t, p, "reviews-1", "SYNCED")
	waitEndpoints(t, r, []string{"10.0.0.3"})

	// The same identity (a fresh certificate, a new connection) reclaims it.
	again := dialStream(t, p.XDSTLSAddr(), mtls(t, p, "shop", "reviews")).open(t, sidecarNode("reviews-1", "shop", "reviews", "10.0.0.3"), sidecarTypes, nil)
	wantEnded(t, real, "Aborted: ads: node reviews-1 opened a newer stream with the same identity (spiffe://cluster.local/ns/shop/sa/reviews)")
	waitStatus(t, p, "reviews-1", "SYNCED")
	waitEndpoints(t, r, []string{"10.0.0.3"})
	if !again.alive() {
		t.Fatal("the new stream ended")
	}
}

func waitStatus(t *testing.T, p *proc.PilotProcess, id, want string) {
	t.Helper()
	testkit.Wait(t, 10*time.Second, func() error {
		if got := proxyStatus(t, p, id); got != want {
			return fmt.Errorf("proxy %s: status %q, want %q", id, got, want)
		}
		return nil
	})
}

// The third finding, first half: a 1 MiB node id and a node with
// 50,000 labels were accepted. Now each is refused with the bound it broke,
// and pilot goes on serving.
func TestHostileNodesRefused(t *testing.T) {
	p := startPilot(t)
	labels := map[string]string{}
	for i := range 50_000 {
		labels[fmt.Sprint("k", i)] = "v"
	}
	c := mtls(t, p, "shop", "reviews")
	for _, tc := range []struct {
		name string
		n    *node.Node
		want string
	}{
		{"1 MiB node id", &node.Node{ID: strings.Repeat("x", 1<<20)}, `InvalidArgument: ads: first request: node id "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...: 1048576 bytes, limit 256`},
		{"50,000 labels", &node.Node{ID: "many", Namespace: "shop", Address: "10.0.0.9", Labels: labels}, "InvalidArgument: ads: first request: node many: metadata: 738969 bytes, limit 65536"},
		{"65 labels", &node.Node{ID: "65", Namespace: "shop", Address: "10.0.0.9", Labels: nLabels(65)}, "InvalidArgument: ads: first request: node 65: metadata.weft.labels: 65 labels, limit 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantEnded(t, dialStream(t, p.XDSTLSAddr(), c).open(t, tc.n, sidecarTypes, nil), tc.want)
		})
	}
	// At the bounds: a 256-byte id and 64 labels register.
	ok := sidecarNode(strings.Repeat("i", node.MaxIDBytes), "shop", "reviews", "10.0.0.3")
	ok.Labels = nLabels(64)
	ok.Labels["app"] = "reviews"
	delete(ok.Labels, "l0")
	dialStream(t, p.XDSTLSAddr(), c).open(t, ok, sidecarTypes, nil)
	waitEndpoints(t, reader(t, p, "reader"), []string{"10.0.0.3"})
}

func nLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprint("l", i)] = "v"
	}
	return m
}

// A revoked certificate's open stream is closed when the CRL changes, and the
// certificate is refused at pilot's TLS handshake from then on (the CRL is read
// per handshake), so it can neither register nor read.
func TestRevokedCertificateRefused(t *testing.T) {
	p := startPilot(t)
	c := p.SVID(t, "shop", "reviews")
	creds := proc.ClientTLS(t, p.CARoot(t), "cluster.local", &c)
	first := dialStream(t, p.XDSTLSAddr(), creds).open(t, sidecarNode("reviews-1", "shop", "reviews", "10.0.0.3"), sidecarTypes, nil)
	waitStatus(t, p, "reviews-1", "SYNCED")
	body := fmt.Sprintf(`{"serial": %q, "reason": "keyCompromise"}`, fmt.Sprintf("%x", c.Leaf.SerialNumber))
	resp, err := http.Post(p.URL()+ca.Prefix+"revocations", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("revoke: %s", resp.Status)
	}
	// Its open stream is cut at the CRL change...
	wantEnded(t, first, fmt.Sprintf("PermissionDenied: ads: node reviews-1: client certificate serial %x of spiffe://cluster.local/ns/shop/sa/reviews is revoked", c.Leaf.SerialNumber))
	waitStatus(t, p, "reviews-1", "DISCONNECTED")
	// ...and a new connection fails its handshake.
	st := dialStream(t, p.XDSTLSAddr(), creds).open(t, sidecarNode("reviews-1", "shop", "reviews", "10.0.0.3"), sidecarTypes, nil)
	if got := st.ended(t); !strings.HasPrefix(got, "Unavailable: ") {
		t.Fatalf("revoked certificate: stream ended with %s, want Unavailable (handshake refused)", got)
	}
}
