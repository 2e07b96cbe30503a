package ads

import (
	"context"
	"fmt"
	"maps"
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
	"github.com/weft-mesh/weft/pilot/xds/authn"
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
	return &stream{s: s, ctx: context.Background(), log: hclog.NewNullLogger(), nodeID: n.ID, watch: w, send: c.send, peer: authn.Peer{MayRegister: true},
		conn: tr.Connect(n, time.Now())}, c
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
		st := &deltaStream{stream: base}
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

// FuzzSotWModel checks the SotW owner against a model client: CDS responses
// replace the client's whole set (absence deletes), EDS responses update the
// named resources only. After every step the client must hold the latest
// snapshot's subscribed resources, and no response may repeat what the client
// already holds unless it just subscribed to something new.
func FuzzSotWModel(f *testing.F) {
	f.Add([]byte{0x10, 0x8f, 0x21, 0xc3, 0x32, 0x00, 0x93, 0xff})
	f.Add([]byte{0x80, 0xc0, 0x01, 0x02, 0xa5, 0x03, 0x04})
	f.Add([]byte{0xbf, 0xe1, 0x44, 0x7f, 0x13})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			return
		}
		src := newFakeSource()
		base, capt := newModelStream(t, src)
		st := &sotwStream{stream: base, types: map[string]*sotwType{}}
		type clientType struct {
			started       bool
			names         []string // explicit names; nil with wildcard
			wildcard      bool
			cache         map[string]string
			known         map[string]string // what the server can know the client holds
			grew          map[string]bool   // subscribed since the last response: may repeat
			explicit      bool              // named a resource at least once
			nonce, verion string
		}
		cl := map[string]*clientType{cds: {cache: map[string]string{}, known: map[string]string{}}, eds: {cache: map[string]string{}, known: map[string]string{}}}
		rev := int64(0)
		for i, op := range ops {
			var err error
			switch {
			case op < 0x80: // publish: low bits pick contents for both types
				rev++
				r := res{cds: {}, eds: {}}
				for j, n := range universe {
					if c := (op >> j) & 1; c != 0 || j == int(op>>4)&3 {
						r[cds][n] = fmt.Sprint(op >> 6)
						r[eds][n] = fmt.Sprint(op&0x30, c)
					}
				}
				src.cur.Store(mkSnap(t, rev, r))
				err = st.pushAll()
			default: // (re)subscribe a type to a set of names
				typ := cds
				if op&0x40 != 0 {
					typ = eds
				}
				c := cl[typ]
				if c.grew == nil {
					c.grew = map[string]bool{}
				}
				grew := c.grew
				var names []string
				for j, n := range universe {
					if op&(1<<j) != 0 {
						names = append(names, n)
					}
				}
				wild := typ == cds && op&0x10 != 0
				if wild {
					names = append(names, "*")
				}
				old := map[string]bool{}
				for _, n := range c.names {
					old[n] = true
				}
				for _, n := range names {
					if !old[n] {
						grew[n] = true
						if n == "*" {
							for _, u := range universe {
								grew[u] = true
							}
						}
					}
				}
				if wild && !c.wildcard {
					for _, u := range universe {
						grew[u] = true
					}
				}
				req := &discoveryv3.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, ResponseNonce: c.nonce, VersionInfo: c.verion}
				if !c.started {
					grew[""] = true // the first request is answered even if empty
				}
				if len(names) > 0 && !(len(names) == 1 && wild) {
					c.explicit = true
				}
				if len(names) == 0 && !c.explicit {
					// the legacy wildcard: nothing ever named
					if !c.wildcard {
						for _, u := range universe {
							grew[u] = true
						}
					}
					wild = true
				}
				c.started, c.names, c.wildcard = true, names, wild
				// The client drops what it unsubscribed from.
				for n := range c.cache {
					if !c.wildcard && !contains(c.names, n) {
						delete(c.cache, n)
						delete(c.known, n)
					}
				}
				err = st.handle(req)
			}
			if err != nil {
				t.Fatalf("op %d (%#x): %v", i, op, err)
			}
			for _, m := range capt.take() {
				r := m.(*discoveryv3.DiscoveryResponse)
				c := cl[r.TypeUrl]
				grew := c.grew
				c.grew = nil
				got := map[string]string{}
				for _, a := range r.Resources {
					n := nameOf(t, r.TypeUrl, a.Value)
					got[n] = versionOf(a.Value)
				}
				same := len(got) > 0 || r.TypeUrl == cds
				for n, v := range got {
					if c.known[n] != v || grew[n] {
						same = false
					}
				}
				if r.TypeUrl == cds && len(got) != len(c.known) {
					same = false
				}
				if same && len(grew) == 0 {
					t.Fatalf("op %d (%#x): %s response repeats what the client holds", i, op, status.TypeName(r.TypeUrl))
				}
				if r.TypeUrl == cds {
					c.cache, c.known = got, maps.Clone(got)
				} else {
					for n, v := range got {
						c.cache[n], c.known[n] = v, v
					}
				}
				c.nonce, c.verion = r.Nonce, r.VersionInfo
				// ACK with the current names.
				if err := st.handle(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, ResourceNames: c.names, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
					t.Fatal(err)
				}
			}
			latest := src.cur.Load()
			if latest == nil {
				continue
			}
			// SotW cannot delete an endpoint assignment: the client keeps one the
			// snapshot dropped, and the server cannot know it still does.
			for n := range cl[eds].known {
				if _, ok := latest.Resources[eds][n]; !ok {
					delete(cl[eds].known, n)
				}
			}
			for _, typ := range []string{cds, eds} {
				c := cl[typ]
				if !c.started {
					continue
				}
				for n, r := range latest.Resources[typ] {
					if (c.wildcard || contains(c.names, n)) && c.cache[n] != versionOf(r.Any.Value) {
						t.Fatalf("op %d (%#x): %s %s: client holds %q, latest %q", i, op, status.TypeName(typ), n, c.cache[n], versionOf(r.Any.Value))
					}
				}
				if typ == cds {
					for n := range c.cache {
						if _, ok := latest.Resources[typ][n]; !ok {
							t.Fatalf("op %d (%#x): CDS: client still holds deleted %s", i, op, n)
						}
					}
				}
			}
		}
	})
}

// versionOf identifies resource bytes (the test compares content, not names).
func versionOf(b []byte) string { return fmt.Sprintf("%x", b) }

func contains(s []string, n string) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}
