package ads

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/adscodec"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	cds = snapshot.ClusterType
	eds = snapshot.EndpointType
	lds = snapshot.ListenerType
	rds = snapshot.RouteType
)

// fakeSource serves one snapshot to every proxy and records connects.
type fakeSource struct {
	mu      sync.Mutex
	watches map[*fakeWatch]struct{}
	cur     atomic.Pointer[snapshot.Snapshot]
	opened  []string
	nodes   []*node.Node // as Connect got them
	closed  []string
}

type fakeWatch struct {
	src     *fakeSource
	id      string
	changed chan struct{}
}

func newFakeSource() *fakeSource { return &fakeSource{watches: map[*fakeWatch]struct{}{}} }

func (f *fakeSource) Connect(n *node.Node) (Watch, error) {
	w := &fakeWatch{src: f, id: n.ID, changed: make(chan struct{}, 1)}
	f.mu.Lock()
	f.watches[w] = struct{}{}
	f.opened = append(f.opened, n.ID)
	f.nodes = append(f.nodes, n)
	f.mu.Unlock()
	return w, nil
}

func (f *fakeSource) publish(s *snapshot.Snapshot) {
	f.cur.Store(s)
	f.mu.Lock()
	ws := make([]*fakeWatch, 0, len(f.watches))
	for w := range f.watches {
		ws = append(ws, w)
	}
	f.mu.Unlock()
	for _, w := range ws {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (f *fakeSource) closedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.closed...)
}

func (w *fakeWatch) Snapshot() *snapshot.Snapshot { return w.src.cur.Load() }
func (w *fakeWatch) Changed() <-chan struct{}     { return w.changed }
func (w *fakeWatch) Close() {
	w.src.mu.Lock()
	delete(w.src.watches, w)
	w.src.closed = append(w.src.closed, w.id)
	w.src.mu.Unlock()
}

type env struct {
	server  *Server
	src     *fakeSource
	tracker *status.Tracker
	client  discoveryv3.AggregatedDiscoveryServiceClient
	addr    string // the ADS listener
}

func testConfig() Config {
	return Config{Logger: hclog.NewNullLogger(), MaxUnacked: 64, SendTimeout: 5 * time.Second, RecvQueue: 8, MaxSubscriptions: 100, MaxReadOnlySubscriptions: 100, DiffCacheEntries: 64,
		TrustDomain: "cluster.local", PlaintextRegistration: true, MaxStreamsPerIdentity: 100, MaxReadOnlyStreams: 100, MaxResourceNameBytes: 512}
}

// start serves ADS on a loopback port and returns a client to it.
func start(t *testing.T, edit func(*Config), opts ...grpc.DialOption) *env {
	t.Helper()
	return startWith(t, edit, nil, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
}

// startWith is start with server options (TLS credentials) and the client's
// dial options (its credentials first).
func startWith(t *testing.T, edit func(*Config), sopts []grpc.ServerOption, opts ...grpc.DialOption) *env {
	t.Helper()
	e := &env{src: newFakeSource()}
	tr, err := status.New(status.Config{Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(), Retention: time.Minute, MaxDisconnected: 100, MaxRevisions: 100})
	if err != nil {
		t.Fatal(err)
	}
	e.tracker = tr
	cfg := testConfig()
	cfg.Source, cfg.Status = e.src, tr
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// With pilot's codec, as pilot/server serves: every test also checks that
	// what it encodes is what the stream sent.
	g := grpc.NewServer(append([]grpc.ServerOption{adscodec.ServerOption()}, sopts...)...)
	s.Register(g)
	e.server = s
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-served
	})
	e.client = discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	e.addr = lis.Addr().String()
	return e
}

// res describes test resources: type -> name -> content; the content string
// changes the resource's bytes and so its version.
type res map[string]map[string]string

func mkSnap(t testing.TB, rev int64, r res) *snapshot.Snapshot {
	t.Helper()
	msgs := map[string]map[string]proto.Message{}
	for typ, byName := range r {
		msgs[typ] = map[string]proto.Message{}
		for n, c := range byName {
			var m proto.Message
			switch typ {
			case cds:
				m = &clusterv3.Cluster{Name: n, AltStatName: c}
			case eds:
				m = &endpointv3.ClusterLoadAssignment{ClusterName: n, Endpoints: []*endpointv3.LocalityLbEndpoints{{Locality: &corev3.Locality{Zone: c}}}}
			case lds:
				m = &listenerv3.Listener{Name: n, StatPrefix: c}
			case rds:
				m = &routev3.RouteConfiguration{Name: n, InternalOnlyHeaders: []string{c}}
			}
			msgs[typ][n] = m
		}
	}
	s, err := snapshot.New(rev, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func nodeProto(id string) *corev3.Node { return &corev3.Node{Id: id} }

// client drives one ADS stream by hand; a reader goroutine queues responses.
type client[Req, Resp any] struct {
	t      *testing.T
	stream interface {
		Send(Req) error
		Recv() (Resp, error)
		CloseSend() error
	}
	resps  chan Resp
	done   chan error
	exited chan struct{} // closed when the reader goroutine returns
}

func newClient[Req, Resp any, S interface {
	Send(Req) error
	Recv() (Resp, error)
	CloseSend() error
}](t *testing.T, open func(context.Context, ...grpc.CallOption) (S, error)) *client[Req, Resp] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &client[Req, Resp]{t: t, stream: s, resps: make(chan Resp, 100), done: make(chan error, 1), exited: make(chan struct{})}
	go func() {
		defer close(c.exited)
		for {
			r, err := s.Recv()
			if err != nil {
				c.done <- err
				return
			}
			select {
			case c.resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-c.exited
	})
	return c
}

func (c *client[Req, Resp]) send(req Req) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *client[Req, Resp]) recv() Resp {
	c.t.Helper()
	select {
	case r := <-c.resps:
		return r
	case err := <-c.done:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(5 * time.Second):
		c.t.Fatal("no response within 5s")
	}
	var zero Resp
	return zero
}

// endErr waits for the stream to end, skipping responses, and returns why.
func (c *client[Req, Resp]) endErr() error {
	c.t.Helper()
	for {
		select {
		case <-c.resps:
		case err := <-c.done:
			return err
		case <-time.After(10 * time.Second):
			c.t.Fatal("stream did not end within 10s")
			return nil
		}
	}
}

type sotwClient struct {
	*client[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse]
}

func (e *env) sotw(t *testing.T) sotwClient { return sotwOn(t, e.client) }

func sotwOn(t *testing.T, c discoveryv3.AggregatedDiscoveryServiceClient) sotwClient {
	return sotwClient{newClient[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse](t, c.StreamAggregatedResources)}
}

// ack answers r as accepted.
func (c sotwClient) ack(r *discoveryv3.DiscoveryResponse, names ...string) {
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names})
}

type deltaClient struct {
	*client[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse]
}

func (e *env) delta(t *testing.T) deltaClient { return deltaOn(t, e.client) }

func deltaOn(t *testing.T, c discoveryv3.AggregatedDiscoveryServiceClient) deltaClient {
	return deltaClient{newClient[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse](t, c.DeltaAggregatedResources)}
}

// dial is another client of the ADS listener, with its own connection.
func (e *env) dial(t *testing.T, opts ...grpc.DialOption) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(e.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

func (c deltaClient) ack(r *discoveryv3.DeltaDiscoveryResponse) {
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
}

// deltaView is a response reduced to what tests compare.
type deltaView struct {
	Type    string
	Nonce   string
	Res     map[string]string // name -> version
	Removed []string
}

func viewDelta(r *discoveryv3.DeltaDiscoveryResponse) deltaView {
	v := deltaView{Type: status.TypeName(r.TypeUrl), Nonce: r.Nonce, Removed: r.RemovedResources, Res: map[string]string{}}
	for _, x := range r.Resources {
		v.Res[x.Name] = x.Version
	}
	return v
}

// ver is the content-hash version of one resource of s.
func ver(s *snapshot.Snapshot, typ, name string) string { return s.Resources[typ][name].Version }

// waitStatus polls the tracker until cond holds for node id.
func (e *env) waitStatus(t *testing.T, id string, what string, cond func(status.ProxyStatus) bool) status.ProxyStatus {
	t.Helper()
	var ps status.ProxyStatus
	testkit.Wait(t, 5*time.Second, func() error {
		var err error
		if ps, err = e.tracker.Proxy(id); err != nil || !cond(ps) {
			return fmt.Errorf("proxy %s: %s not reached; status %+v (err %v)", id, what, ps, err)
		}
		return nil
	})
	return ps
}

func typeStatus(ps status.ProxyStatus, typ string) status.TypeStatus {
	for _, ts := range ps.Types {
		if ts.TypeURL == typ {
			return ts
		}
	}
	return status.TypeStatus{}
}

func names(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// nameOf decodes a resource and returns its name.
func nameOf(t *testing.T, typ string, b []byte) string {
	t.Helper()
	var m interface{ proto.Message }
	var name func() string
	switch typ {
	case cds:
		x := &clusterv3.Cluster{}
		m, name = x, x.GetName
	case eds:
		x := &endpointv3.ClusterLoadAssignment{}
		m, name = x, x.GetClusterName
	case lds:
		x := &listenerv3.Listener{}
		m, name = x, x.GetName
	case rds:
		x := &routev3.RouteConfiguration{}
		m, name = x, x.GetName
	default:
		t.Fatalf("unexpected type %s", typ)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return name()
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
