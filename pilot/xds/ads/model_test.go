package ads

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// The model tests drive a stream's owner logic directly (no gRPC) with a
// sequence of operations decoded from fuzz input, apply every response to a model
// client cache, and check after each step that the cache holds exactly the latest
// snapshot's resources for what the client subscribes to, and that no resource is
// ever resent at a version the client already holds unless it just subscribed.

var universe = []string{"a", "b", "c", "d"}

// ops decodes fuzz input into steps: each byte is one operation.
func modelSnap(t *testing.T, rev int64, b byte, typ string) *snapshot.Snapshot {
	t.Helper()
	r := res{typ: {}}
	for i, n := range universe {
		// two bits per name: absent, or one of three contents
		if c := (b >> (2 * i)) & 3; c != 0 {
			r[typ][n] = fmt.Sprint(c)
		}
	}
	return mkSnap(t, rev, r)
}

type capture struct {
	mu    sync.Mutex
	resps []proto.Message
}

func (c *capture) send(m proto.Message) error {
	c.mu.Lock()
	c.resps = append(c.resps, m)
	c.mu.Unlock()
	return nil
}

func (c *capture) take() []proto.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.resps
	c.resps = nil
	return out
}

func newModelStream(t *testing.T, src *fakeSource) (*stream, *capture) {
	t.Helper()
	tr, err := status.New(status.Config{Logger: hclog.NewNullLogger(), Registerer: prometheus.NewRegistry(), Retention: time.Minute, MaxDisconnected: 1, MaxRevisions: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Source, cfg.Status = src, tr
	cfg.MaxUnacked = 1 << 30
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := &node.Node{ID: "m"}
	w, _ := src.Connect(n)
	c := &capture{}
	return &stream{s: s, ctx: context.Background(), log: hclog.NewNullLogger(), nodeID: n.ID, watch: w, send: c.send,
		conn: tr.Connect(n, time.Now()), outstanding: map[string][]uint64{}}, c
}

func FuzzDeltaModel(f *testing.F) {
	f.Add([]byte{0x10, 0x55, 0x21, 0xaa, 0x32, 0x00, 0x13, 0xff})
	f.Add([]byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08})
	f.Add([]byte{0x40, 0x1b, 0x50, 0xe4, 0x61, 0x27, 0x70})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			return
		}
		typ := cds
		src := newFakeSource()
		base, capt := newModelStream(t, src)
		st := &deltaStream{stream: base, types: map[string]*deltaType{}}
		cache := map[string]string{}
		wildcard, subs := false, map[string]bool{}
		started := false
		rev := int64(0)
		for i := 0; i < len(ops); i++ {
			op := ops[i]
			var err error
			subscribedNow := map[string]bool{} // names (re)subscribed in this step: may be resent
			switch op >> 5 {
			case 0, 1: // publish a snapshot
				rev++
				src.cur.Store(modelSnap(t, rev, op<<2|op>>6, typ))
				err = st.pushAll()
			case 2, 3: // subscribe to a name, or the wildcard
				req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ}
				n := "*"
				if k := int(op & 7); k < len(universe) {
					n = universe[k]
				}
				req.ResourceNamesSubscribe = []string{n}
				if !started && op&8 != 0 {
					// reconnect: claim some versions already held
					req.InitialResourceVersions = map[string]string{}
					for j, u := range universe {
						if op&(1<<j) != 0 {
							req.InitialResourceVersions[u] = "claimed"
							cache[u] = "claimed"
						}
					}
				}
				if n == "*" {
					wildcard = true
					for _, u := range universe {
						subscribedNow[u] = true
					}
				} else {
					subs[n] = true
					subscribedNow[n] = true
				}
				started = true
				err = st.handle(req)
			default: // unsubscribe a name, or the wildcard
				if !started {
					continue
				}
				n := "*"
				if k := int(op & 7); k < len(universe) {
					n = universe[k]
				}
				if n == "*" {
					wildcard = false
				} else {
					delete(subs, n)
					subscribedNow[n] = true // the wildcard exception may answer it
				}
				// The client drops what it no longer subscribes to.
				for name := range cache {
					if !wildcard && !subs[name] {
						delete(cache, name)
					}
				}
				err = st.handle(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesUnsubscribe: []string{n}})
			}
			if err != nil {
				t.Fatalf("op %d (%#x): %v", i, op, err)
			}
			for _, m := range capt.take() {
				r := m.(*discoveryv3.DeltaDiscoveryResponse)
				for _, x := range r.Resources {
					if cache[x.Name] == x.Version && !subscribedNow[x.Name] {
						t.Fatalf("op %d (%#x): %s resent at the version the client holds", i, op, x.Name)
					}
					cache[x.Name] = x.Version
				}
				for _, n := range r.RemovedResources {
					delete(cache, n)
				}
				// ACK it, as a client would.
				if err := st.handle(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: r.Nonce}); err != nil {
					t.Fatal(err)
				}
			}
			// A client keeps only what it subscribes to (a claim in
			// initial_resource_versions for a name it did not subscribe is dropped).
			for name := range cache {
				if !wildcard && !subs[name] {
					delete(cache, name)
				}
			}
			latest := src.cur.Load()
			if !started || latest == nil {
				continue
			}
			want := map[string]string{}
			for n, r := range latest.Resources[typ] {
				if wildcard || subs[n] {
					want[n] = r.Version
				}
			}
			got := map[string]string{}
			for n, v := range cache {
				if wildcard || subs[n] {
					got[n] = v
				}
			}
			if fmt.Sprint(sorted(want)) != fmt.Sprint(sorted(got)) {
				t.Fatalf("op %d (%#x): client holds %v, want %v (wildcard=%v subs=%v)", i, op, sorted(got), sorted(want), wildcard, subs)
			}
		}
	})
}

func sorted(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
