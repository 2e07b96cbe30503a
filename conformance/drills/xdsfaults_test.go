package drills

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/pilot/xds/sign"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsclient"
	"github.com/weft-mesh/weft/tools/testkit"
)

// handADS is a hand-driven SotW ADS server: the test decides every response.
type handADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	streams chan *handStream
}

type handStream struct {
	t     *testing.T
	reqs  chan *discovery.DiscoveryRequest
	sends chan *discovery.DiscoveryResponse
	ctx   context.Context
	nonce int
}

func (h *handADS) StreamAggregatedResources(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	ctx := st.Context()
	hs := &handStream{reqs: make(chan *discovery.DiscoveryRequest, 64), sends: make(chan *discovery.DiscoveryResponse), ctx: ctx}
	select {
	case h.streams <- hs:
	case <-ctx.Done():
		return nil
	}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case hs.reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case resp := <-hs.sends:
			if err := st.Send(resp); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func startHandADS(t *testing.T, addr string) *handADS {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &handADS{streams: make(chan *handStream, 4)}
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, h)
	done := make(chan struct{})
	go func() { gs.Serve(ln); close(done) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return h
}

// send sends a response and returns its nonce.
func (hs *handStream) send(typ, version, nonce string, res ...*anypb.Any) {
	hs.t.Helper()
	select {
	case hs.sends <- &discovery.DiscoveryResponse{TypeUrl: typ, VersionInfo: version, Nonce: nonce, Resources: res}:
	case <-time.After(5 * time.Second):
		hs.t.Fatal("stream not accepting responses")
	}
}

// respond sends a response with a fresh nonce and returns the sidecar's answer to
// it (an ACK or a NACK), skipping other requests.
func (hs *handStream) respond(typ, version string, res ...*anypb.Any) *discovery.DiscoveryRequest {
	hs.t.Helper()
	hs.nonce++
	nonce := fmt.Sprint(hs.nonce)
	hs.send(typ, version, nonce, res...)
	return hs.answer(typ, nonce, 5*time.Second)
}

// answer waits for the request answering nonce; nil if none comes within d.
func (hs *handStream) answer(typ, nonce string, d time.Duration) *discovery.DiscoveryRequest {
	hs.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case r := <-hs.reqs:
			if r.GetTypeUrl() == typ && r.GetResponseNonce() == nonce {
				return r
			}
		case <-timeout:
			return nil
		}
	}
}

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// signed returns the manifest resource pilot would send for these resources.
func signedFor(t *testing.T, priv ed25519.PrivateKey, nodeID string, rev int64, res map[string][]*anypb.Any) *anypb.Any {
	t.Helper()
	byType := map[string]map[string]snapshot.Resource{}
	for typ, as := range res {
		byType[typ] = map[string]snapshot.Resource{}
		for _, a := range as {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			byType[typ][drillkit.NameOf(m)] = snapshot.Resource{Name: drillkit.NameOf(m), Any: a}
		}
	}
	r, err := sign.Manifest(priv, nodeID, snapshot.FromResources(rev, byType), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Any
}

func isACK(r *discovery.DiscoveryRequest) bool { return r != nil && r.GetErrorDetail() == nil }

// Drill (d): a corrupt, duplicate, out-of-order or unknown-type response is NACKed
// or ignored as the xDS protocol says, and nothing of it is applied: the sidecar
// keeps serving the active configuration, then takes the next good push.
func TestDrillBadResponses(t *testing.T) {
	const ip = "127.77.4.1"
	priv := drillkit.NewKey(t)
	w := drillkit.NewWorkload(t, ip, "reviews-v1-a", priv.Public().(ed25519.PublicKey))
	drillkit.StartApp(t, ip+":8080", "v1")
	drillkit.StartApp(t, ip+":8081", "v2")
	h := startHandADS(t, ip+":15010")
	sc := drillkit.StartSidecar(t, w, ip+":15010")
	var hs *handStream
	select {
	case hs = <-h.streams:
		hs.t = t
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not open a stream")
	}

	cluster := anyOf(t, dt.EDSCluster("backend", dt.ClusterOpts{}))
	eps := func(app string) *anypb.Any { return anyOf(t, dt.Endpoints("backend", dt.MustAddr(app))) }
	lis := anyOf(t, dt.HTTPListener("outbound", dt.MustAddr(w.Outbound()), "routes"))
	routes := anyOf(t, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", 0))))
	v1 := map[string][]*anypb.Any{xdsclient.TypeCluster: {cluster}, xdsclient.TypeEndpoint: {eps(ip + ":8080")},
		xdsclient.TypeListener: {lis}, xdsclient.TypeRoute: {routes}}
	for _, typ := range []string{xdsclient.TypeCluster, xdsclient.TypeEndpoint, xdsclient.TypeListener, xdsclient.TypeRoute} {
		if r := hs.respond(typ, "1", v1[typ]...); !isACK(r) {
			t.Fatalf("%s v1 not ACKed: %v", xdsclient.ShortName(typ), r)
		}
	}
	if r := hs.respond(manifest.TypeURL, "1", signedFor(t, priv, w.NodeID, 1, v1)); !isACK(r) {
		t.Fatalf("manifest not ACKed: %v", r)
	}
	sc.WaitReady(5 * time.Second)
	serves := func(want string) {
		t.Helper()
		code, body, _, err := drillkit.Get(drillkit.Client, w, "reviews", "/")
		if err != nil || code != http.StatusOK || body != want+" /" {
			t.Fatalf("request = %d %q %v, want %q", code, body, err, want)
		}
	}
	serves("v1")
	typeStatus := func(typ string) xdsTypeView {
		for _, ts := range sc.ConfigDump().XDS.Types {
			if ts.TypeURL == typ {
				return xdsTypeView{version: ts.Version, nacks: ts.NACKs, ignored: ts.Ignored, resources: ts.Resources, lastError: ts.LastError}
			}
		}
		t.Fatalf("no status for %s", typ)
		return xdsTypeView{}
	}

	// Corrupt: an EDS response whose first assignment moves traffic to v2 and whose
	// second is garbage. NACKed whole: the first is not applied either.
	corrupt := &anypb.Any{TypeUrl: xdsclient.TypeEndpoint, Value: []byte{0x0a, 0xff, 0xff, 0xff}}
	r := hs.respond(xdsclient.TypeEndpoint, "2", eps(ip+":8081"), corrupt)
	if isACK(r) || r == nil || !strings.Contains(r.GetErrorDetail().GetMessage(), "type ClusterLoadAssignment: resource #1") {
		t.Fatalf("corrupt response: %v", r)
	}
	t.Logf("corrupt: NACK %q", r.GetErrorDetail().GetMessage())
	serves("v1")
	if st := typeStatus(xdsclient.TypeEndpoint); st.version != "1" || st.nacks != 1 {
		t.Fatalf("after corrupt: %+v", st)
	}

	// Duplicate names in one response: NACKed whole.
	r = hs.respond(xdsclient.TypeEndpoint, "3", eps(ip+":8081"), eps(ip+":8081"))
	if isACK(r) || r == nil || r.GetErrorDetail().GetMessage() != "type ClusterLoadAssignment: resource backend: duplicate name in one response" {
		t.Fatalf("duplicate response: %v", r)
	}
	serves("v1")

	// A replayed response (same nonce as the last one): ignored, not answered.
	hs.send(xdsclient.TypeEndpoint, "3", fmt.Sprint(hs.nonce), eps(ip+":8081"))
	if r := hs.answer(xdsclient.TypeEndpoint, fmt.Sprint(hs.nonce), 500*time.Millisecond); r != nil {
		t.Fatalf("replayed nonce answered: %v", r)
	}
	testkit.Eventually(t, 5*time.Second, "replay counted as ignored", func() bool { return typeStatus(xdsclient.TypeEndpoint).ignored == 1 })
	serves("v1")

	// Out of order: a route configuration nobody references yet (its listener has
	// not arrived). Accepted as SotW allows, held nowhere, nothing changes.
	early := anyOf(t, dt.RouteConfig("not-yet-referenced", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", 0))))
	if r := hs.respond(xdsclient.TypeRoute, "2", early); !isACK(r) {
		t.Fatalf("out-of-order route: %v", r)
	}
	if st := typeStatus(xdsclient.TypeRoute); st.resources != 1 {
		t.Fatalf("unreferenced route held: %+v", st)
	}
	serves("v1")

	// Unknown type: ignored without an answer (a NACK would subscribe to it).
	hs.send("type.googleapis.com/weft.unknown.v1.Thing", "1", "u1", &anypb.Any{TypeUrl: "type.googleapis.com/weft.unknown.v1.Thing"})
	if r := hs.answer("type.googleapis.com/weft.unknown.v1.Thing", "u1", 500*time.Millisecond); r != nil {
		t.Fatalf("unknown type answered: %v", r)
	}
	testkit.Eventually(t, 5*time.Second, "unknown type counted", func() bool { return sc.ConfigDump().XDS.UnknownTypeResponses == 1 })
	serves("v1")

	// A manifest signed for another node: NACKed naming the check.
	r = hs.respond(manifest.TypeURL, "2", signedFor(t, priv, "someone-else", 2, v1))
	if isACK(r) || r == nil || !strings.Contains(r.GetErrorDetail().GetMessage(), "manifest refused (node)") {
		t.Fatalf("foreign manifest: %v", r)
	}
	serves("v1")
	if cd := sc.ConfigDump(); cd.Revision != 1 || cd.Counters.Activations != 1 {
		t.Fatalf("after faults: revision %d activations %d", cd.Revision, cd.Counters.Activations)
	}

	// The next good push (EDS, then its manifest) is taken.
	v2 := map[string][]*anypb.Any{xdsclient.TypeCluster: {cluster}, xdsclient.TypeEndpoint: {eps(ip + ":8081")},
		xdsclient.TypeListener: {lis}, xdsclient.TypeRoute: {routes}}
	if r := hs.respond(xdsclient.TypeEndpoint, "4", v2[xdsclient.TypeEndpoint]...); !isACK(r) {
		t.Fatalf("good EDS: %v", r)
	}
	serves("v1") // not active before its manifest
	if r := hs.respond(manifest.TypeURL, "3", signedFor(t, priv, w.NodeID, 2, v2)); !isACK(r) {
		t.Fatalf("good manifest: %v", r)
	}
	serves("v2")
	if cd := sc.ConfigDump(); cd.Revision != 2 {
		t.Fatalf("revision %d after recovery", cd.Revision)
	}
}

type xdsTypeView struct {
	version   string
	nacks     uint64
	ignored   uint64
	resources int
	lastError string
}
