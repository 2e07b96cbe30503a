package publish

import (
	"crypto/ed25519"
	"errors"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sidecar = &node.Node{ID: "reviews-1", Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
	Address: "127.0.0.5", InboundPort: 15006}

// TestGenerateChecksSidecarSnapshots: a Weft sidecar's snapshot that the
// sidecar's own decoder rejects is refused at pilot with the node, revision and
// the sidecar's reason; a plain xDS client's snapshot is not checked (it is not
// our sidecar); a later good generation clears the error.
func TestGenerateChecksSidecarSnapshots(t *testing.T) {
	badCluster := &clusterv3.Cluster{Name: "outbound|80||x.shop.svc.cluster.local",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}}
	bad, err := snapshot.New(7, map[string]map[string]proto.Message{snapshot.ClusterType: {badCluster.Name: badCluster}})
	if err != nil {
		t.Fatal(err)
	}
	good, err := snapshot.New(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reported []string
	s := newSource(Config{Logger: hclog.NewNullLogger(), Key: testKey(t), Validity: time.Hour,
		ReportGenError: func(id string, rev int64, msg string) { reported = append(reported, msg) }})
	tests := []struct {
		name    string
		snap    *snapshot.Snapshot
		n       *node.Node
		rev     int64
		wantErr string
	}{
		{"sidecar, bad cluster", bad, sidecar, 7,
			`snapshot for reviews-1 at revision 7 fails sidecar validation, not sent: CDS "outbound|80||x.shop.svc.cluster.local": ` +
				`cluster "outbound|80||x.shop.svc.cluster.local": type: unsupported discovery type STRICT_DNS (want EDS, STATIC or ORIGINAL_DST)`},
		{"plain client, same snapshot", bad, &node.Node{ID: "grpc-client"}, 7, ""},
		{"sidecar, good snapshot", good, sidecar, 8, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := s.Generate(func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return tt.snap, nil })
			_, err := g(&ir.Mesh{Revision: tt.rev}, tt.n)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("error\n%s\nwant\n%s", got, tt.wantErr)
			}
			if e := s.scopeError(meshcache.DefaultScopeKey(tt.n)); e.msg != tt.wantErr || (e.msg != "" && e.rev != tt.rev) {
				t.Errorf("scope error %+v, want %q at %d", e, tt.wantErr, tt.rev)
			}
		})
	}
	// An older generation finishing late does not overwrite a newer outcome.
	g := s.Generate(func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return bad, nil })
	if _, err := g(&ir.Mesh{Revision: 9}, sidecar); err == nil {
		t.Fatal("want an error at revision 9")
	}
	g = s.Generate(func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return good, nil })
	if _, err := g(&ir.Mesh{Revision: 3}, sidecar); err != nil {
		t.Fatal(err)
	}
	if e := s.scopeError(meshcache.DefaultScopeKey(sidecar)); e.rev != 9 {
		t.Errorf("scope error %+v, want the revision 9 failure kept", e)
	}
	// A generator's own error passes through unchanged.
	boom := errors.New("boom")
	g = s.Generate(func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return nil, boom })
	if _, err := g(&ir.Mesh{Revision: 10}, sidecar); !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if len(reported) != 0 {
		t.Errorf("reported %q with no open watch", reported)
	}
}

func testKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// TestCheckCache: equal content is checked once whatever the snapshot value;
// other content is checked again; a full cache starts over.
func TestCheckCache(t *testing.T) {
	mk := func(rev int64, name string) *snapshot.Snapshot {
		c := &clusterv3.Cluster{Name: name}
		s, err := snapshot.New(rev, map[string]map[string]proto.Message{snapshot.ClusterType: {name: c}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	calls := 0
	c := checkCache{max: 2, run: func(*snapshot.Snapshot) error { calls++; return nil }}
	steps := []struct {
		snap      *snapshot.Snapshot
		wantCalls int
	}{
		{mk(1, "a"), 1},
		{mk(2, "a"), 1}, // another snapshot (and revision), same content
		{mk(3, "b"), 2},
		{mk(4, "a"), 2},
		{mk(5, "c"), 3}, // full: starts over
		{mk(6, "a"), 4},
	}
	for i, st := range steps {
		if err := c.check(st.snap); err != nil {
			t.Fatal(err)
		}
		if calls != st.wantCalls {
			t.Fatalf("step %d: %d checks, want %d", i, calls, st.wantCalls)
		}
	}
}

// TestGenErrorReported: a scope's failed generation wakes its streams, each
// reports it once for its node, and a later success clears it.
func TestGenErrorReported(t *testing.T) {
	type report struct {
		node string
		rev  int64
		msg  string
	}
	var got []report
	s := newSource(Config{Logger: hclog.NewNullLogger(), Key: testKey(t), Validity: time.Hour,
		ReportGenError: func(id string, rev int64, msg string) { got = append(got, report{id, rev, msg}) }})
	key := meshcache.DefaultScopeKey(sidecar)
	// A watch wakes its stream through meshcache's channel: a real proxy of a
	// cache that does not run (so only the watch signals it).
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cache, err := meshcache.New(meshcache.Config{Store: st, Logger: hclog.NewNullLogger(), Debounce: time.Millisecond, MaxDelay: 10 * time.Millisecond, GenWorkers: 1,
		Generate: func(*ir.Mesh, *node.Node) (*snapshot.Snapshot, error) { return nil, errors.New("not run") }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cache.Connect(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := &watch{s: s, p: p, n: sidecar, key: key}
	s.scopes[key] = map[*watch]struct{}{w: {}}
	woken := func() bool {
		select {
		case <-w.Changed():
			return true
		default:
			return false
		}
	}

	s.recordGen(key, 5, errors.New("bad"))
	if !woken() {
		t.Fatal("a failed generation did not wake the scope's stream")
	}
	w.reportGenError()
	w.reportGenError() // once per change
	s.recordGen(key, 6, nil)
	if !woken() {
		t.Fatal("a recovered generation did not wake the scope's stream")
	}
	w.reportGenError()
	s.recordGen(key, 7, nil) // nothing to clear: no wakeup
	if woken() {
		t.Fatal("a success after a success woke the stream")
	}
	want := []report{{"reviews-1", 5, "bad"}, {"reviews-1", 0, ""}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(report{})); d != "" {
		t.Errorf("reports (-want +got):\n%s", d)
	}
}

// TestContentCache: a scope's content statement is signed once per scope
// snapshot; a snapshot with the same content reuses it; another scope or other
// content is signed anew; at half its validity it is signed again; the previous
// generation stays cached beside the latest.
func TestContentCache(t *testing.T) {
	mk := func(rev int64, names ...string) *snapshot.Snapshot {
		byName := map[string]proto.Message{}
		for _, n := range names {
			byName[n] = &clusterv3.Cluster{Name: n}
		}
		s, err := snapshot.New(rev, map[string]map[string]proto.Message{snapshot.ClusterType: byName})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	priv := testKey(t)
	c := newContentCache(time.Hour, 0)
	c.acquire("a")
	c.acquire("b")
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	snap1, snap1b, snap2 := mk(1, "x"), mk(2, "x"), mk(3, "x", "y")
	steps := []struct {
		name    string
		scope   string
		base    *snapshot.Snapshot
		now     time.Time
		sameAs  int   // index of the step whose signature is reused; -1: newly signed
		wantRev int64 // revision the content statement carries
	}{
		{"first", "a", snap1, t0, -1, 1},
		{"same snapshot", "a", snap1, t0.Add(time.Minute), 0, 1},
		{"new revision, same content", "a", snap1b, t0.Add(2 * time.Minute), 0, 1},
		{"another scope", "b", snap1, t0.Add(2 * time.Minute), -1, 1},
		{"new content", "a", snap2, t0.Add(3 * time.Minute), -1, 3},
		{"previous generation still cached", "a", snap1b, t0.Add(4 * time.Minute), 0, 1},
		{"half validity", "a", snap2, t0.Add(3*time.Minute + 30*time.Minute), -1, 3},
	}
	var got []*manifest.Signed
	for i, st := range steps {
		e, err := c.get(st.scope, st.base, st.now, priv)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got = append(got, e.signed)
		if st.sameAs >= 0 && e.signed != got[st.sameAs] {
			t.Errorf("%s: signed again, want step %d's signature", st.name, st.sameAs)
		}
		for j := 0; j < i && st.sameAs < 0; j++ {
			if got[j] == e.signed {
				t.Errorf("%s: reused step %d's signature, want a new one", st.name, j)
			}
		}
		var pc manifestpb.Content
		if err := proto.Unmarshal(e.signed.Body, &pc); err != nil {
			t.Fatal(err)
		}
		if pc.GetScope() != st.scope || pc.GetRevision() != st.wantRev || int(pc.GetCount()) != len(st.base.Resources[snapshot.ClusterType]) {
			t.Errorf("%s: content scope %q revision %d count %d, want %q %d %d", st.name, pc.GetScope(), pc.GetRevision(), pc.GetCount(),
				st.scope, st.wantRev, len(st.base.Resources[snapshot.ClusterType]))
		}
	}
	// Entries go with the scope's last watch.
	c.release("a")
	c.release("b")
	c.mu.Lock()
	left := len(c.scopes)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d scopes cached after every watch closed", left)
	}
}

// TestContentSignedOncePerChange: the streams of one scope asking at once share
// one signature.
func TestContentSignedOncePerChange(t *testing.T) {
	snap, err := snapshot.New(1, map[string]map[string]proto.Message{snapshot.ClusterType: {"x": &clusterv3.Cluster{Name: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	c, priv := newContentCache(time.Hour, 0), testKey(t)
	c.acquire("s")
	defer c.release("s")
	const streams = 64
	out := make(chan *manifest.Signed, streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := c.get("s", snap, time.Now(), priv)
			if err != nil {
				t.Error(err)
			}
			out <- e.signed
		}()
	}
	wg.Wait()
	close(out)
	first := <-out
	for s := range out {
		if s != first {
			t.Fatal("one scope snapshot signed more than once")
		}
	}
}
