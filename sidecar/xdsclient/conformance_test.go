package xdsclient

// Conformance against go-control-plane's server, an independent xDS implementation
// (research/xds-peers.md §2). ACK/NACK is observed on the server side through its
// callbacks, so these tests see what a real management server sees.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/tools/testkit"
)

// event is one request the server received, classified.
type event struct {
	stream  int64
	first   bool // first request of its stream
	typeURL string
	nonce   string
	version string // SotW: version_info of the request; delta: system version of the response ACKed
	nack    string // error_detail message
	initial map[string]string
	node    *corev3.Node
}

func (e event) isACK() bool  { return e.nonce != "" && e.nack == "" }
func (e event) isNACK() bool { return e.nonce != "" && e.nack != "" }

// recorder collects server-side events.
type recorder struct {
	mu     sync.Mutex
	events []event
	seen   map[int64]bool
	sent   map[int64]map[string]string // stream -> nonce -> version sent
}

func newRecorder() *recorder {
	return &recorder{seen: map[int64]bool{}, sent: map[int64]map[string]string{}}
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.first = !r.seen[e.stream]
	r.seen[e.stream] = true
	r.events = append(r.events, e)
}

func (r *recorder) sentVersion(stream int64, nonce, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent[stream] == nil {
		r.sent[stream] = map[string]string{}
	}
	r.sent[stream][nonce] = version
}

func (r *recorder) callbacks() serverv3.CallbackFuncs {
	return serverv3.CallbackFuncs{
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			r.add(event{stream: id, typeURL: req.TypeUrl, nonce: req.ResponseNonce, version: req.VersionInfo, nack: req.GetErrorDetail().GetMessage(), node: req.Node})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			r.sentVersion(id, resp.Nonce, resp.VersionInfo)
		},
		StreamDeltaRequestFunc: func(id int64, req *discovery.DeltaDiscoveryRequest) error {
			r.mu.Lock()
			v := r.sent[id][req.ResponseNonce]
			r.mu.Unlock()
			r.add(event{stream: id, typeURL: req.TypeUrl, nonce: req.ResponseNonce, version: v, nack: req.GetErrorDetail().GetMessage(), initial: req.InitialResourceVersions, node: req.Node})
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
			r.sentVersion(id, resp.Nonce, resp.SystemVersionInfo)
		},
	}
}

// find returns the events matching pred.
func (r *recorder) find(pred func(event) bool) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, e := range r.events {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) has(pred func(event) bool) bool { return len(r.find(pred)) > 0 }

// refServer is go-control-plane's ADS server on a local port.
type refServer struct {
	addr   string
	rec    *recorder
	gs     *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func startServer(t *testing.T, c cachev3.Cache, addr string) *refServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder()
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, c, rec.callbacks()))
	s := &refServer{addr: lis.Addr().String(), rec: rec, gs: gs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop kills the server like a crash would: streams are cut.
func (s *refServer) stop() {
	s.gs.Stop()
	s.cancel()
	<-s.done
}

// quiet is go-control-plane's logger, silenced.
type quiet struct{}

func (quiet) Debugf(string, ...any) {}
func (quiet) Infof(string, ...any)  {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}

var _ log.Logger = quiet{}

func snapshot(t *testing.T, version string, listeners ...types.Resource) *cachev3.Snapshot {
	t.Helper()
	return snapshotRoutes(t, version, []types.Resource{route("r1")}, listeners...)
}

func snapshotRoutes(t *testing.T, version string, routes []types.Resource, listeners ...types.Resource) *cachev3.Snapshot {
	t.Helper()
	s, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType:  {cluster("c1")},
		resourcev3.EndpointType: {endpoints("c1")},
		resourcev3.ListenerType: listeners,
		resourcev3.RouteType:    routes,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setSnapshot(t *testing.T, c cachev3.SnapshotCache, s *cachev3.Snapshot) {
	t.Helper()
	if err := c.SetSnapshot(context.Background(), testNode().ID, s); err != nil {
		t.Fatal(err)
	}
}

// runClient starts c.Run and stops it at cleanup.
func runClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	return c
}

func holds(c *Client, typeURL string, want ...string) bool {
	return slices.Equal(names(c.State(), typeURL), want)
}

func ackedAll(rec *recorder, version string) bool {
	for _, tu := range allTypes {
		if !rec.has(func(e event) bool { return e.typeURL == tu && e.isACK() && e.version == version }) {
			return false
		}
	}
	return true
}

func TestConformanceGoControlPlane(t *testing.T) {
	for _, mode := range []Mode{SotW, Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
			setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
			srv := startServer(t, cache, "127.0.0.1:0")
			ap := &applier{}
			c := runClient(t, testConfig(t, mode, ap, srv.addr))

			// 1. Good version: every type ACKed, state complete.
			testkit.Eventually(t, waitTimeout, "v1 ACKed for all types", func() bool { return ackedAll(srv.rec, "v1") })
			for tu, want := range map[string][]string{TypeListener: {"l1"}, TypeRoute: {"r1"}, TypeCluster: {"c1"}, TypeEndpoint: {"c1"}} {
				if got := names(c.State(), tu); !slices.Equal(got, want) {
					t.Fatalf("%s: hold %v, want %v", ShortName(tu), got, want)
				}
			}
			// The workload registered through node metadata.
			first := srv.rec.find(func(e event) bool { return e.first })
			if len(first) != 1 {
				t.Fatalf("%d first requests, want 1", len(first))
			}
			got, err := envoynode.FromProto(first[0].node)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(testNode(), got); diff != "" {
				t.Fatalf("registered node (-want +got):\n%s", diff)
			}
			testkit.Wait(t, waitTimeout, confirmed(c))

			// 2. Bad version: NACK with the exact message, old state kept.
			setSnapshot(t, cache, snapshot(t, "v2", listener("l1", "r1"), listener("bad-l", "r1")))
			const wantNACK = "type Listener: resource bad-l: invalid"
			testkit.Eventually(t, waitTimeout, "NACK of v2", func() bool {
				return srv.rec.has(func(e event) bool { return e.typeURL == TypeListener && e.isNACK() })
			})
			for _, e := range srv.rec.find(func(e event) bool { return e.isNACK() }) {
				if e.nack != wantNACK || e.typeURL != TypeListener {
					t.Fatalf("NACK %q for %s, want %q for Listener", e.nack, ShortName(e.typeURL), wantNACK)
				}
				if mode == SotW && e.version != "v1" {
					t.Fatalf("SotW NACK carries version_info %q, want last good v1", e.version)
				}
			}
			if !holds(c, TypeListener, "l1") || c.State().Versions[TypeListener] != "v1" {
				t.Fatalf("after NACK hold %v at %q, want [l1] at v1", names(c.State(), TypeListener), c.State().Versions[TypeListener])
			}
			st := typeStatus(c, TypeListener)
			if st.LastError != wantNACK || st.NACKs == 0 {
				t.Fatalf("status after NACK: %+v", st)
			}
			// A stream whose latest push was rejected does not confirm the state.
			if later := time.Now().Add(time.Hour); c.LastConfirmed(later).Equal(later) {
				t.Fatal("state confirmed while the latest push is NACKed")
			}

			// 3. Next good version recovers.
			setSnapshot(t, cache, snapshot(t, "v3", listener("l1", "r1"), listener("l2", "r1")))
			testkit.Eventually(t, waitTimeout, "v3 ACKed", func() bool {
				return srv.rec.has(func(e event) bool { return e.typeURL == TypeListener && e.isACK() && e.version == "v3" })
			})
			testkit.Eventually(t, waitTimeout, "v3 held", func() bool { return holds(c, TypeListener, "l1", "l2") })
			if st := typeStatus(c, TypeListener); st.LastError != "" || st.Version != "v3" {
				t.Fatalf("status after recovery: %+v", st)
			}
			testkit.Wait(t, waitTimeout, confirmed(c))

			// 4. The listener now points at another route: RDS follows, r1 is dropped.
			setSnapshot(t, cache, snapshotRoutes(t, "v4", []types.Resource{route("r2")}, listener("l1", "r2")))
			testkit.Eventually(t, waitTimeout, "route r2 replaces r1", func() bool { return holds(c, TypeRoute, "r2") && holds(c, TypeListener, "l1") })
			if st := typeStatus(c, TypeRoute); !slices.Equal(st.Subscribed, []string{"r2"}) {
				t.Fatalf("RDS subscribed to %v, want [r2]", st.Subscribed)
			}
		})
	}
}

// confirmed holds when the client's state is confirmed current as of now; its error
// says when it was last confirmed.
func confirmed(c *Client) func() error {
	return func() error {
		now := time.Now()
		if got := c.LastConfirmed(now); !got.Equal(now) {
			return fmt.Errorf("state last confirmed %v ago (status %+v)", now.Sub(got), c.Status())
		}
		return nil
	}
}

func typeStatus(c *Client, typeURL string) TypeStatus {
	for _, s := range c.Status().Types {
		if s.TypeURL == typeURL {
			return s
		}
	}
	return TypeStatus{}
}

// TestReconnect: after the server restarts, the client reconnects with backoff,
// announces what it holds (delta initial_resource_versions, SotW version_info) and
// keeps its state meanwhile; the confirmation clock stops while no stream is up.
func TestReconnect(t *testing.T) {
	for _, mode := range []Mode{SotW, Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
			setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
			srv := startServer(t, cache, "127.0.0.1:0")
			c := runClient(t, testConfig(t, mode, &applier{}, srv.addr))
			testkit.Eventually(t, waitTimeout, "v1 ACKed", func() bool { return ackedAll(srv.rec, "v1") })
			testkit.Wait(t, waitTimeout, confirmed(c))
			held := map[string]string{}
			for n, r := range c.State().Resources[TypeListener] {
				held[n] = r.Version
			}

			srv.stop()
			testkit.Eventually(t, waitTimeout, "disconnected", func() bool { return !c.Status().Connected })
			frozen := c.LastConfirmed(time.Now())
			if later := time.Now().Add(time.Hour); !c.LastConfirmed(later).Equal(frozen) {
				t.Fatalf("confirmation clock runs without a stream")
			}
			if !holds(c, TypeListener, "l1") {
				t.Fatalf("state lost on disconnect")
			}

			srv2 := startServer(t, cache, srv.addr)
			initialLDS := func(e event) bool { return e.typeURL == TypeListener && e.nonce == "" }
			testkit.Eventually(t, waitTimeout, "LDS resubscribed after reconnect", func() bool { return srv2.rec.has(initialLDS) })
			lds := srv2.rec.find(initialLDS)
			if mode == Delta {
				if diff := cmp.Diff(held, lds[0].initial); diff != "" {
					t.Fatalf("initial_resource_versions (-held +sent):\n%s", diff)
				}
				// Named types are resubscribed by name, with their versions too.
				initialRDS := func(e event) bool { return e.typeURL == TypeRoute && e.nonce == "" }
				testkit.Eventually(t, waitTimeout, "RDS resubscribed", func() bool { return srv2.rec.has(initialRDS) })
				if got, want := srv2.rec.find(initialRDS)[0].initial, map[string]string{"r1": c.State().Resources[TypeRoute]["r1"].Version}; !cmp.Equal(got, want) {
					t.Fatalf("RDS initial_resource_versions %v, want %v", got, want)
				}
			} else if lds[0].version != "v1" {
				t.Fatalf("SotW reconnect version_info %q, want v1", lds[0].version)
			}
			testkit.Wait(t, waitTimeout, confirmed(c))
		})
	}
}

// TestFailover: the first server is down, the second serves; when the serving one
// dies the client moves back to the first once it is up.
func TestFailover(t *testing.T) {
	for _, mode := range []Mode{SotW, Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
			setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
			// A free address with nothing listening, on a loopback address of its
			// own: a freed 127.0.0.1 port can meanwhile become another
			// connection's ephemeral port (seen under a loaded CI run).
			lis, err := net.Listen("tcp", "127.77.100.1:0")
			if err != nil {
				t.Fatal(err)
			}
			dead := lis.Addr().String()
			lis.Close()
			second := startServer(t, cache, "127.0.0.1:0")
			c := runClient(t, testConfig(t, mode, &applier{}, dead, second.addr))
			testkit.Eventually(t, waitTimeout, "v1 ACKed by the second server", func() bool { return ackedAll(second.rec, "v1") })
			if got := c.Status().Server; got != second.addr {
				t.Fatalf("server %q, want %q", got, second.addr)
			}
			first := startServer(t, cache, dead)
			second.stop()
			// Delta: the server has nothing new for what the client announces, so it
			// stays silent; being subscribed on the first server is the proof.
			testkit.Eventually(t, waitTimeout, "failed over to the first server", func() bool {
				st := c.Status()
				return st.Connected && st.Server == dead && first.rec.has(func(e event) bool { return e.first })
			})
			if !holds(c, TypeListener, "l1") {
				t.Fatal("state lost across failover")
			}
		})
	}
}

// TestDeltaLinearCache: per-resource updates and removals from LinearCache, a NACK
// without resend, and recovery.
func TestDeltaLinearCache(t *testing.T) {
	lc := cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithLogger(quiet{}),
		cachev3.WithInitialResources(map[string]types.Resource{"l1": listener("l1")}))
	srv := startServer(t, lc, "127.0.0.1:0")
	cfg := testConfig(t, Delta, &applier{}, srv.addr)
	cfg.Types = []string{TypeListener}
	c := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "l1", func() bool { return holds(c, TypeListener, "l1") })

	steps := []struct {
		name string
		do   func() error
		want []string
		nack string
	}{
		{"add l2", func() error { return lc.UpdateResource("l2", listener("l2")) }, []string{"l1", "l2"}, ""},
		{"delete l1", func() error { return lc.DeleteResource("l1") }, []string{"l2"}, ""},
		{"bad resource", func() error { return lc.UpdateResource("bad-x", listener("bad-x")) }, []string{"l2"}, "type Listener: resource bad-x: invalid"},
		{"remove bad", func() error { return lc.DeleteResource("bad-x") }, []string{"l2"}, ""},
		{"add l3", func() error { return lc.UpdateResource("l3", listener("l3")) }, []string{"l2", "l3"}, ""},
	}
	for _, s := range steps {
		before := len(srv.rec.find(func(e event) bool { return e.nonce != "" }))
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		testkit.Eventually(t, waitTimeout, s.name+" answered", func() bool {
			return len(srv.rec.find(func(e event) bool { return e.nonce != "" })) > before
		})
		last := srv.rec.find(func(e event) bool { return e.nonce != "" })
		if got := last[len(last)-1].nack; got != s.nack {
			t.Fatalf("%s: NACK %q, want %q", s.name, got, s.nack)
		}
		if !holds(c, TypeListener, s.want...) {
			t.Fatalf("%s: hold %v, want %v", s.name, names(c.State(), TypeListener), s.want)
		}
	}
	// No resend after the NACK: the subscription, the ACK of the first response, and
	// exactly one ACK/NACK per change.
	if all, want := srv.rec.find(func(e event) bool { return true }), 2+len(steps); len(all) != want {
		t.Fatalf("%d requests, want %d: %+v", len(all), want, all)
	}
}

// TestHungServerFailover: a server that accepts TCP but never speaks gRPC is given
// up after ConnectTimeout and the next server is used.
func TestHungServerFailover(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	accepted := make(chan net.Conn, 16)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		conns.Wait()
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, quiet{})
	setSnapshot(t, cache, snapshot(t, "v1", listener("l1", "r1")))
	srv := startServer(t, cache, "127.0.0.1:0")
	cfg := testConfig(t, Delta, &applier{}, hung.Addr().String(), srv.addr)
	cfg.ConnectTimeout = 200 * time.Millisecond
	start := time.Now()
	c := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "served by the second server", func() bool { return holds(c, TypeListener, "l1") })
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("failover took %v with a 200ms connect timeout", took)
	}
}

// TestMaxRecvBytes: a response larger than the limit is refused by the transport; the
// client keeps its state and reconnects.
func TestMaxRecvBytes(t *testing.T) {
	lc := cachev3.NewLinearCache(resourcev3.ListenerType, cachev3.WithLogger(quiet{}),
		cachev3.WithInitialResources(map[string]types.Resource{"l1": listener("l1")}))
	srv := startServer(t, lc, "127.0.0.1:0")
	cfg := testConfig(t, Delta, &applier{}, srv.addr)
	cfg.Types = []string{TypeListener}
	cfg.MaxRecvBytes = 1024
	c := runClient(t, cfg)
	testkit.Eventually(t, waitTimeout, "l1", func() bool { return holds(c, TypeListener, "l1") })
	big := &listenerv3.Listener{Name: "l2", StatPrefix: strings.Repeat("r", 2048)}
	if err := lc.UpdateResource("l2", big); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, waitTimeout, "a reconnect after the oversized response", func() bool {
		return len(srv.rec.find(func(e event) bool { return e.first })) >= 2
	})
	if !holds(c, TypeListener, "l1") {
		t.Fatalf("hold %v, want [l1]", names(c.State(), TypeListener))
	}
}
