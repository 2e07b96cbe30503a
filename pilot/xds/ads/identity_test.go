package ads

import (
	"crypto/tls"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/authn/authntest"
	"github.com/weft-mesh/weft/tools/testkit"
)

// tlsEnv serves ADS over TLS (client certificates verified when given) with
// plaintext registration off unless edit turns it on.
type tlsEnv struct {
	*env
	ca *authntest.CA
}

func startTLS(t *testing.T, edit func(*Config)) *tlsEnv {
	t.Helper()
	ca := authntest.NewCA(t)
	e := startWith(t, func(c *Config) {
		c.PlaintextRegistration = false
		if edit != nil {
			edit(c)
		}
	}, []grpc.ServerOption{grpc.Creds(ca.ServerCreds(t))}, grpc.WithTransportCredentials(ca.ClientCreds(nil)))
	return &tlsEnv{env: e, ca: ca}
}

// as is a client presenting a certificate for SPIFFE ID id ("" = none).
func (e *tlsEnv) as(t *testing.T, id string) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	if id == "" {
		return e.dial(t, grpc.WithTransportCredentials(e.ca.ClientCreds(nil)))
	}
	c := e.ca.SVID(t, id)
	return e.dial(t, grpc.WithTransportCredentials(e.ca.ClientCreds(&c)))
}

const reviewsID = "spiffe://cluster.local/ns/shop/sa/reviews"

func sidecarNode(id, ns, sa string) *node.Node {
	return &node.Node{ID: id, Namespace: ns, ServiceAccount: sa, Address: "10.0.0.1", InboundPort: 15006, Labels: map[string]string{"app": "reviews"}}
}

func codeMsg(err error) string {
	st, _ := grpcstatus.FromError(err)
	return st.Code().String() + ": " + st.Message()
}

// The node's namespace and service account are its certificate's; metadata that
// disagrees is refused; registering without a certificate is refused while a
// plain xDS client without registration metadata is served.
func TestRegistrationBoundToCertificate(t *testing.T) {
	e := startTLS(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	refused := []struct {
		name string
		id   string
		n    *node.Node
		want string
	}{
		{"namespace disagrees", reviewsID, sidecarNode("a", "payments", "reviews"),
			`PermissionDenied: ads: node a: metadata namespace "payments" disagrees with the client certificate's "shop" (spiffe://cluster.local/ns/shop/sa/reviews)`},
		{"service account disagrees", reviewsID, sidecarNode("a", "shop", "ratings"),
			`PermissionDenied: ads: node a: metadata serviceAccount "ratings" disagrees with the client certificate's "reviews" (spiffe://cluster.local/ns/shop/sa/reviews)`},
		{"no certificate", "", sidecarNode("a", "shop", "reviews"),
			`PermissionDenied: ads: node a: registration as a workload of namespace "shop" refused: unauthenticated peer 127.0.0.1:`},
		{"not a workload", "spiffe://cluster.local/weft/publisher", sidecarNode("a", "shop", "reviews"),
			"Unauthenticated: ads: authn: client certificate serial"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			c := sotwOn(t, e.as(t, tc.id))
			// Not c.send: a peer refused before its first request is read may
			// see the send fail; the stream's status says why.
			_ = c.stream.Send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(tc.n), TypeUrl: cds})
			if got := codeMsg(c.endErr()); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got  %s\nwant %s...", got, tc.want)
			}
		})
	}
	if got := e.src.opened; len(got) != 0 {
		t.Fatalf("refused streams reached the source: %v", got)
	}

	t.Run("matching certificate", func(t *testing.T) {
		c := sotwOn(t, e.as(t, reviewsID))
		c.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("a", "shop", "")), TypeUrl: cds})
		if r := c.recv(); len(r.Resources) != 1 {
			t.Fatalf("response %v", r)
		}
		e.src.mu.Lock()
		got := *e.src.nodes[len(e.src.nodes)-1]
		e.src.mu.Unlock()
		if got.Namespace != "shop" || got.ServiceAccount != "reviews" || got.Identity != reviewsID || !got.Registers() {
			t.Fatalf("node given to the source: %+v", got)
		}
	})
	t.Run("plain xDS client without a certificate reads", func(t *testing.T) {
		c := sotwOn(t, e.as(t, ""))
		c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("grpc-client"), TypeUrl: cds})
		if r := c.recv(); len(r.Resources) != 1 {
			t.Fatalf("response %v", r)
		}
		e.src.mu.Lock()
		got := *e.src.nodes[len(e.src.nodes)-1]
		e.src.mu.Unlock()
		if got.Identity != "" || got.Registers() {
			t.Fatalf("node given to the source: %+v", got)
		}
	})
}

// On plaintext the registration needs PlaintextRegistration; Identity is never
// set without a certificate.
func TestPlaintextRegistration(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		t.Run(fmt.Sprint("allowed=", allowed), func(t *testing.T) {
			e := start(t, func(c *Config) { c.PlaintextRegistration = allowed })
			e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
			c := e.sotw(t)
			c.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("a", "shop", "reviews")), TypeUrl: cds})
			if !allowed {
				if got := codeMsg(c.endErr()); !strings.HasPrefix(got, `PermissionDenied: ads: node a: registration as a workload of namespace "shop" refused`) {
					t.Fatal(got)
				}
				return
			}
			c.recv()
			if n := e.src.nodes[0]; n.Identity != "" || n.Namespace != "shop" {
				t.Fatalf("node %+v", n)
			}
		})
	}
}

// A node id held by one identity cannot be claimed by another (nor without a
// certificate): refused, and the holder keeps its stream, its status and its
// pushes. The same identity reclaiming it closes the older stream, and the
// status stays CONNECTED when that older stream ends.
func TestNodeIDClaims(t *testing.T) {
	e := startTLS(t, nil)
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	real := sotwOn(t, e.as(t, reviewsID))
	real.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("reviews-1", "shop", "reviews")), TypeUrl: cds})
	r := real.recv()
	real.ack(r)
	e.waitStatus(t, "reviews-1", "synced", func(ps status.ProxyStatus) bool { return ps.Status == status.Synced })

	for _, who := range []string{"spiffe://cluster.local/ns/shop/sa/ratings", ""} {
		imp := sotwOn(t, e.as(t, who))
		n := nodeProto("reviews-1") // read-only claims are refused too
		if who != "" {
			n = envoynode.ToProto(sidecarNode("reviews-1", "shop", "ratings"))
		}
		imp.send(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: cds})
		if got := codeMsg(imp.endErr()); !strings.HasPrefix(got, `AlreadyExists: ads: node id "reviews-1" is held by another stream of another identity;`) {
			t.Fatalf("claim by %q: %s", who, got)
		}
	}
	// The holder is undisturbed: still the tracked stream, still pushed to.
	if ps, _ := e.tracker.Proxy("reviews-1"); ps.Status != status.Synced {
		t.Fatalf("holder's status after refused claims: %+v", ps)
	}
	e.src.publish(mkSnap(t, 2, res{cds: {"c": "2"}}))
	real.ack(real.recv())

	// The same identity (a new certificate, another connection) takes over.
	again := sotwOn(t, e.as(t, reviewsID))
	again.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("reviews-1", "shop", "reviews")), TypeUrl: cds})
	again.ack(again.recv())
	if got := codeMsg(real.endErr()); !strings.HasPrefix(got, "Aborted: ads: node reviews-1 opened a newer stream with the same identity (spiffe://cluster.local/ns/shop/sa/reviews)") {
		t.Fatalf("older stream ended with %s", got)
	}
	// The stream count drops after the older stream's close (watch, status)
	// is complete.
	testkit.Eventually(t, 5*time.Second, "older stream closed", func() bool { return e.server.Streams(reviewsID+"@127.0.0.1") == 1 })
	if got := e.src.closedIDs(); len(got) != 1 {
		t.Fatalf("closed watches %v", got)
	}
	// Synced is reached on the new stream's ACK and not undone by the old
	// stream's end (which Eventually above has seen).
	e.waitStatus(t, "reviews-1", "synced on the new stream", func(ps status.ProxyStatus) bool {
		return ps.Status == status.Synced && ps.DisconnectedAt == nil
	})
	e.src.publish(mkSnap(t, 3, res{cds: {"c": "3"}}))
	again.ack(again.recv())
}

// Without PlaintextRegistration nothing proves a plaintext identity, so a
// plaintext claim of a held id is refused even from the same address; with it,
// the same address may reclaim (today's behaviour, for local development).
func TestPlaintextClaims(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		t.Run(fmt.Sprint("allowed=", allowed), func(t *testing.T) {
			e := start(t, func(c *Config) { c.PlaintextRegistration = allowed })
			e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
			first := e.sotw(t)
			first.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n"), TypeUrl: cds})
			first.recv()
			second := sotwOn(t, e.dial(t, grpc.WithTransportCredentials(insecure.NewCredentials())))
			second.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n"), TypeUrl: cds})
			if !allowed {
				if got := codeMsg(second.endErr()); !strings.HasPrefix(got, `AlreadyExists: ads: node id "n" is held`) {
					t.Fatal(got)
				}
				return
			}
			second.recv()
			if got := codeMsg(first.endErr()); !strings.HasPrefix(got, "Aborted: ads: node n opened a newer stream") {
				t.Fatal(got)
			}
		})
	}
}

// MaxStreamsPerIdentity: at the bound every stream is served, one more is
// refused before its first request, and a closed stream frees its place.
func TestStreamsPerIdentity(t *testing.T) {
	const limit = 3
	e := startTLS(t, func(c *Config) { c.MaxStreamsPerIdentity = limit })
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	cl := e.as(t, reviewsID)
	var open []sotwClient
	for i := range limit {
		c := sotwOn(t, cl)
		c.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode(fmt.Sprint("r", i), "shop", "reviews")), TypeUrl: cds})
		c.recv()
		open = append(open, c)
	}
	over := sotwOn(t, e.as(t, reviewsID)) // another connection: the bound is per identity, not per connection
	if got := codeMsg(over.endErr()); got != "ResourceExhausted: ads: spiffe://cluster.local/ns/shop/sa/reviews already has 3 ADS streams open (limit 3 per identity and address)" {
		t.Fatal(got)
	}
	// Another identity and unauthenticated readers count apart.
	other := sotwOn(t, e.as(t, "spiffe://cluster.local/ns/shop/sa/ratings"))
	other.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("x"), TypeUrl: cds})
	other.recv()
	if err := open[0].stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	open[0].endErr()
	key := reviewsID + "@127.0.0.1"
	testkit.Eventually(t, 5*time.Second, "a place freed", func() bool { return e.server.Streams(key) == limit-1 })
	c := sotwOn(t, cl)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("r9"), TypeUrl: cds})
	c.recv()
}

// Unauthenticated plaintext streams count per source address.
func TestStreamsPerAddress(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxStreamsPerIdentity = 2 })
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	for i := range 2 {
		c := e.sotw(t)
		c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto(fmt.Sprint("p", i)), TypeUrl: cds})
		c.recv()
	}
	if got := codeMsg(e.sotw(t).endErr()); !strings.HasPrefix(got, "ResourceExhausted: ads: unauthenticated peer 127.0.0.1:") ||
		!strings.HasSuffix(got, "already has 2 ADS streams open (limit 2 per identity and address)") {
		t.Fatal(got)
	}
}

// MaxSubscriptions counts over all types of a stream; MaxResourceNameBytes each
// name; both at the bound and one past it, SotW and delta.
func TestSubscriptionBounds(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxSubscriptions = 10; c.MaxResourceNameBytes = 40 })
	e.src.publish(mkSnap(t, 1, res{eds: {"e0": "1"}, rds: {"r0": "1"}}))
	long := func(n int) string { return strings.Repeat("n", n) }
	t.Run("sotw", func(t *testing.T) {
		c := e.sotw(t)
		c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("s"), TypeUrl: eds, ResourceNames: append(names(5, "e"), long(40))})
		c.recv()
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: rds, ResourceNames: names(4, "r")}) // 10 in all
		c.recv()
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: rds, ResourceNames: names(5, "r")}) // 11
		if got := codeMsg(c.endErr()); got != "ResourceExhausted: ads: node s: RDS subscription would bring the stream to 11 resource names, limit 10 over all types" {
			t.Fatal(got)
		}
		c = e.sotw(t)
		c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("s2"), TypeUrl: eds, ResourceNames: []string{long(41)}})
		if got := codeMsg(c.endErr()); got != `InvalidArgument: ads: EDS resource name "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"...: 41 bytes, limit 40` {
			t.Fatal(got)
		}
	})
	t.Run("delta", func(t *testing.T) {
		c := e.delta(t)
		c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("d"), TypeUrl: eds, ResourceNamesSubscribe: append(names(5, "e"), long(40))})
		c.recv()
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: rds, ResourceNamesSubscribe: names(4, "r")})
		c.recv()
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: rds, ResourceNamesSubscribe: []string{"r9"}})
		if got := codeMsg(c.endErr()); got != "ResourceExhausted: ads: node d: RDS subscription would bring the stream to 11 resource names, limit 10 over all types" {
			t.Fatal(got)
		}
		c = e.delta(t)
		c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("d2"), TypeUrl: eds, InitialResourceVersions: map[string]string{long(41): "v"}})
		if got := codeMsg(c.endErr()); got != `InvalidArgument: ads: EDS resource name "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"...: 41 bytes, limit 40` {
			t.Fatal(got)
		}
		c = e.delta(t)
		c.send(&discoveryv3.DeltaDiscoveryRequest{Node: nodeProto("d3"), TypeUrl: eds, ResourceNamesSubscribe: names(11, "e")})
		if got := codeMsg(c.endErr()); got != "ResourceExhausted: ads: node d3: EDS subscribes to 11 resource names, limit 10 over all types" {
			t.Fatal(got)
		}
	})
}

// The node bounds pilot enforces admit whatever a sidecar's bootstrap can hold,
// and the labels bound is the Workload resource's.
func TestNodeBoundsAdmitRenderedSidecars(t *testing.T) {
	if node.MaxLabels != resource.MaxLabels || render.MaxLabels > node.MaxLabels || render.MaxIDBytes > node.MaxIDBytes ||
		render.MaxLabelBytes > node.MaxLabelValueBytes || render.MaxLabelBytes > node.MaxLabelKeyBytes {
		t.Fatalf("node bounds (labels %d, id %d, key %d, value %d) below render's (labels %d, id %d, label %d) or resource.MaxLabels %d",
			node.MaxLabels, node.MaxIDBytes, node.MaxLabelKeyBytes, node.MaxLabelValueBytes, render.MaxLabels, render.MaxIDBytes, render.MaxLabelBytes, resource.MaxLabels)
	}
}

// A 1 MiB node id and 50,000 labels are refused with the bound they broke.
func TestHostileNodesRefused(t *testing.T) {
	e := start(t, nil)
	big := sidecarNode("n", "shop", "reviews")
	big.Labels = map[string]string{}
	for i := range 50_000 {
		big.Labels[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		n    *discoveryv3.DiscoveryRequest
		want string
	}{
		{&discoveryv3.DiscoveryRequest{Node: nodeProto(strings.Repeat("x", 1<<20)), TypeUrl: cds},
			`InvalidArgument: ads: first request: node id "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...: 1048576 bytes, limit 256`},
		{&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(big), TypeUrl: cds}, "InvalidArgument: ads: first request: node n: metadata: 739034 bytes, limit 65536"},
	} {
		c := e.sotw(t)
		c.send(tc.n)
		if got := codeMsg(c.endErr()); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

// A stream that may not register has MaxReadOnlySubscriptions; one with a
// certificate MaxSubscriptions. Both at the bound and one past it.
func TestReadOnlySubscriptionBound(t *testing.T) {
	e := startTLS(t, func(c *Config) { c.MaxSubscriptions = 10; c.MaxReadOnlySubscriptions = 3 })
	e.src.publish(mkSnap(t, 1, res{eds: {"e0": "1"}}))
	for _, tc := range []struct {
		id    string
		limit int
		want  string
	}{
		{"", 3, "ResourceExhausted: ads: node n: EDS requests 4 resource names, limit 3 over all types (a stream that may not register; with a client certificate the limit is 10)"},
		{reviewsID, 10, "ResourceExhausted: ads: node n: EDS requests 11 resource names, limit 10 over all types"},
	} {
		ok := sotwOn(t, e.as(t, tc.id))
		ok.send(&discoveryv3.DiscoveryRequest{Node: nodeProto(fmt.Sprint("ok", tc.limit)), TypeUrl: eds, ResourceNames: names(tc.limit, "e")})
		ok.recv()
		over := sotwOn(t, e.as(t, tc.id))
		over.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n"), TypeUrl: eds, ResourceNames: names(tc.limit+1, "e")})
		if got := codeMsg(over.endErr()); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// fakeRevocations is a CRL feed: revoke publishes a CRL listing serials.
type fakeRevocations struct {
	ca *authntest.CA
	mu sync.Mutex
	ch chan struct{}
	cl *revoke.CRL
	n  int64
}

func (f *fakeRevocations) TrustChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

func (f *fakeRevocations) CRL() *revoke.CRL {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cl
}

func (f *fakeRevocations) revoke(t *testing.T, serials ...*big.Int) {
	t.Helper()
	issuer, key := f.ca.CRLSigner()
	var es []revoke.Entry
	for _, s := range serials {
		es = append(es, revoke.Entry{Serial: s, RevokedAt: time.Now()})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	der, err := revoke.Build(issuer, key, f.n, es, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if f.cl, err = revoke.Parse(der, f.ca.Bundle()); err != nil {
		t.Fatal(err)
	}
	close(f.ch)
	f.ch = make(chan struct{})
}

// A stream whose certificate the CRL comes to list is cut at the CRL change;
// others stay; the revoked certificate cannot open a stream again.
func TestRevokedStreamCut(t *testing.T) {
	revs := &fakeRevocations{ch: make(chan struct{})}
	e := startTLS(t, func(c *Config) { c.Revocations = revs })
	revs.ca = e.ca
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	bad := e.ca.SVID(t, reviewsID)
	dial := func(c tls.Certificate) discoveryv3.AggregatedDiscoveryServiceClient {
		return e.dial(t, grpc.WithTransportCredentials(e.ca.ClientCreds(&c)))
	}
	victim := sotwOn(t, dial(bad))
	victim.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("reviews-1", "shop", "reviews")), TypeUrl: cds})
	victim.ack(victim.recv())
	other := sotwOn(t, e.as(t, "spiffe://cluster.local/ns/shop/sa/ratings"))
	other.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("ratings-1", "shop", "ratings")), TypeUrl: cds})
	other.ack(other.recv())

	revs.revoke(t, big.NewInt(12345)) // a CRL change that does not list it
	revs.revoke(t, bad.Leaf.SerialNumber)
	want := fmt.Sprintf("PermissionDenied: ads: node reviews-1: client certificate serial %x of %s is revoked (CRL 2); closing the stream", bad.Leaf.SerialNumber, reviewsID)
	if got := codeMsg(victim.endErr()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	e.src.publish(mkSnap(t, 2, res{cds: {"c": "2"}}))
	other.ack(other.recv()) // still served
	again := sotwOn(t, dial(bad))
	again.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("reviews-1", "shop", "reviews")), TypeUrl: cds})
	if got := codeMsg(again.endErr()); got != want {
		t.Fatalf("reopen: got %s", got)
	}
}

// MaxReadOnlyStreams counts the streams that may not register over all peers:
// at the bound they are served, one more is refused, a stream with a
// certificate is not counted, and a closed stream frees its place.
func TestReadOnlyStreamsBound(t *testing.T) {
	e := startTLS(t, func(c *Config) { c.MaxReadOnlyStreams = 2 })
	e.src.publish(mkSnap(t, 1, res{cds: {"c": "1"}}))
	var open []sotwClient
	for i := range 2 {
		c := sotwOn(t, e.as(t, ""))
		c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto(fmt.Sprint("ro", i)), TypeUrl: cds})
		c.recv()
		open = append(open, c)
	}
	over := sotwOn(t, e.as(t, ""))
	if got := codeMsg(over.endErr()); !strings.HasPrefix(got, "ResourceExhausted: ads: pilot already serves 2 streams without a client certificate (limit 2); unauthenticated peer 127.0.0.1:") {
		t.Fatal(got)
	}
	withCert := sotwOn(t, e.as(t, reviewsID))
	withCert.send(&discoveryv3.DiscoveryRequest{Node: envoynode.ToProto(sidecarNode("r", "shop", "reviews")), TypeUrl: cds})
	withCert.recv()
	if err := open[0].stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	open[0].endErr()
	testkit.Eventually(t, 5*time.Second, "a place freed", func() bool { return e.server.Streams("ip:127.0.0.1") == 1 })
	c := sotwOn(t, e.as(t, ""))
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("ro9"), TypeUrl: cds})
	c.recv()
}
