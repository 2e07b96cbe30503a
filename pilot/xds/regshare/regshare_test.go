package regshare_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/regshare"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replica is one pilot replica's store, shared registrations and cache; it
// records the nodes of each compile.
type replica struct {
	st    *etcdstore.Store
	cache *meshcache.Cache
	stop  func() // shuts the replica down cleanly (once)

	mu   sync.Mutex
	last []*node.Node
}

func (r *replica) compiled() []*node.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func startReplica(t *testing.T, c *etcdtest.Cluster, prefix, id string, lim etcdstore.RegistrationLimits) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: c.Endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	regs, err := st.ShareRegistrations(ctx, id, etcdstore.MinReplicaTTL, lim)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{st: st}
	r.cache, err = meshcache.New(meshcache.Config{Store: st, Logger: hclog.NewNullLogger(),
		Debounce: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, GenWorkers: 1,
		Shared: regshare.New(regs, hclog.NewNullLogger()),
		Compile: func(in compile.Input) (*ir.Mesh, error) {
			r.mu.Lock()
			r.last = in.Proxies
			r.mu.Unlock()
			return &ir.Mesh{Revision: in.Revision}, nil
		},
		Generate: func(m *ir.Mesh, n *node.Node) (*snapshot.Snapshot, error) {
			return snapshot.New(m.Revision, map[string]map[string]proto.Message{snapshot.ClusterType: {"c": &clusterv3.Cluster{Name: "c"}}})
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.cache.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := st.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// waitNodes waits until r's latest compile has exactly want (by id, in order).
func waitNodes(t *testing.T, r *replica, want ...*node.Node) {
	t.Helper()
	sort.Slice(want, func(i, j int) bool { return want[i].ID < want[j].ID })
	testkit.Wait(t, 15*time.Second, func() error {
		got := r.compiled()
		if len(got) == 0 && len(want) == 0 {
			return nil
		}
		if d := cmp.Diff(want, got); d != "" {
			return fmt.Errorf("compiled nodes (-want +got):\n%s", d)
		}
		return nil
	})
}

func sidecar(id, addr string) *node.Node {
	return &node.Node{ID: id, Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews", "version": "v1"},
		Address: addr, InboundPort: 15006, Interception: "iptables", Identity: "spiffe://cluster.local/ns/shop/sa/reviews",
		Locality: node.Locality{Region: "eu", Zone: "eu-1"}}
}

// TestSharedRegistrations: a sidecar registered on replica B is compiled by
// replica A with every field compile reads; a node on both (a reconnect) is
// compiled once, the local one; of two connections on B the newer is shared,
// and the older again once the newer ends; leaving B takes it out of A; past B's bound a
// registering connection is refused; a clean shutdown of B takes its
// registrations out of A at once.
func TestSharedRegistrations(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	prefix := "/regshare/"
	a := startReplica(t, c, prefix, "a", etcdstore.RegistrationLimits{})
	b := startReplica(t, c, prefix, "b", etcdstore.RegistrationLimits{MaxEntries: 2})

	onB := sidecar("reviews-1", "10.0.0.1")
	pb, err := b.cache.Connect(onB)
	if err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, onB)
	waitNodes(t, b, onB)

	// Reconnected to A while B still has it: once, A's own.
	moved := sidecar("reviews-1", "10.0.0.9")
	pa, err := a.cache.Connect(moved)
	if err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, moved)
	pa.Close()
	waitNodes(t, a, onB)

	// Two connections of one node on B: the newer is shared; when it ends
	// first, the older one is shared again.
	again := sidecar("reviews-1", "10.0.0.8")
	pb2, err := b.cache.Connect(again)
	if err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, again)
	pb2.Close()
	waitNodes(t, a, onB)

	// At B's bound (2) and one past.
	second := sidecar("reviews-2", "10.0.0.2")
	p2, err := b.cache.Connect(second)
	if err != nil {
		t.Fatalf("2nd registration of at most 2: %v", err)
	}
	if _, err := b.cache.Connect(sidecar("reviews-3", "10.0.0.3")); err == nil || !strings.Contains(err.Error(), "too many registrations") {
		t.Fatalf("3rd registration of at most 2: %v, want refused", err)
	}
	// A proxy that does not register is not bounded by it.
	if p, err := b.cache.Connect(&node.Node{ID: "gateway", Namespace: "shop"}); err != nil {
		t.Fatalf("a non-registering proxy at the bound: %v", err)
	} else {
		p.Close()
	}
	waitNodes(t, a, onB, second)
	pb.Close()
	waitNodes(t, a, second)

	// B shut down cleanly: its lease is revoked, A drops its registrations.
	defer p2.Close()
	b.stop()
	waitNodes(t, a)
}
