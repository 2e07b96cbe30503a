package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/certs/manifest/manifestpb"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

const mesh = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, protocol: HTTP}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: details, namespace: shop}
spec:
  selector: {app: details}
  ports:
  - {name: http, port: 9080, protocol: HTTP}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-1, namespace: shop, labels: {app: reviews}}
spec: {address: 10.0.0.1}
`

const (
	reviews = "outbound|9080||reviews.shop.svc.cluster.local"
	details = "outbound|9080||details.shop.svc.cluster.local"
)

// held is what a delta client holds after applying every response in order.
func held(rs []servertest.Response, typ string) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		if r.TypeURL != typ || r.Nacked != "" {
			continue
		}
		for n, v := range r.Names {
			out[n] = v
		}
		for _, n := range r.Removed {
			delete(out, n)
		}
	}
	return out
}

// TestDeltaReconnectEndToEnd runs the whole pipeline (store → compile → gen →
// ADS): a delta client reconnecting with initial_resource_versions gets exactly
// the resources that changed while it was away and the removal of what was
// deleted, with fresh nonces on the new stream.
func TestDeltaReconnectEndToEnd(t *testing.T) {
	p := servertest.Start(t, servertest.Options{})
	rev := p.Apply(t, mesh)
	types := []string{snapshot.ClusterType, snapshot.EndpointType}
	n := envoynode.ToProto((&node.Node{ID: "debugger"}))
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: n, Types: types})
	p.WaitProxy(t, 10*time.Second, "debugger", "first sync", func(ps status.ProxyStatus) bool {
		return ps.EffectiveRevision >= rev && ps.Status == "SYNCED"
	})
	first := c.Responses()
	cds, eds := held(first, snapshot.ClusterType), held(first, snapshot.EndpointType)
	for _, name := range []string{reviews, details} {
		if cds[name] == "" || eds[name] == "" {
			t.Fatalf("first sync lacks %s: CDS %v EDS %v", name, cds, eds)
		}
	}
	c.Close()

	// While away: details is deleted, reviews gets a second endpoint.
	p.Delete(t, "services", "shop", "details")
	rev = p.Apply(t, mesh[strings.Index(mesh, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Workload"):]+`---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-2, namespace: shop, labels: {app: reviews}}
spec: {address: 10.0.0.2}
`)
	testkit.Eventually(t, 10*time.Second, "pilot compiled the new revision", func() bool { return p.Revision(t, rev).WrittenAt != nil })
	c2 := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: n, Types: types,
		Initial: map[string]map[string]string{snapshot.ClusterType: cds, snapshot.EndpointType: eds}})
	p.WaitProxy(t, 10*time.Second, "debugger", "resync", func(ps status.ProxyStatus) bool {
		return ps.EffectiveRevision >= rev && ps.Status == "SYNCED"
	})
	type view struct {
		Type    string
		Names   []string
		Removed []string
	}
	var got []view
	nonces := map[string]bool{}
	for _, r := range c2.Responses() {
		var names []string
		for n := range r.Names {
			names = append(names, n)
		}
		sort.Strings(names)
		got = append(got, view{Type: r.TypeURL, Names: names, Removed: r.Removed})
		if nonces[r.Nonce] {
			t.Errorf("nonce %s used twice on one stream", r.Nonce)
		}
		nonces[r.Nonce] = true
	}
	// The reviews cluster did not change (only its endpoints): not resent. Each
	// type is answered when the client asks for it (CDS first).
	want := []view{
		{Type: snapshot.ClusterType, Removed: []string{details}},
		{Type: snapshot.EndpointType, Names: []string{reviews}},
		{Type: snapshot.EndpointType, Removed: []string{details}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("responses after reconnect (-want +got):\n%s", d)
	}

	// The xDS metrics are on the admin /metrics page.
	page := p.Metrics(t)
	for _, m := range []string{`weft_pilot_xds_pushes_total{type="EDS"} `, `weft_pilot_xds_push_bytes_total{type="CDS"} `,
		"weft_pilot_xds_connected_proxies 1", "weft_pilot_xds_convergence_seconds_count "} {
		if !strings.Contains(page, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	if strings.Contains(page, "weft_pilot_xds_nacks_total{") {
		t.Errorf("/metrics counts NACKs in a run without any")
	}
}

// TestServeADSLimits: every limit is checked before serving.
func TestServeADSLimits(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*server.XDSLimits)
		wantErr string
	}{
		{"zero debounce", func(l *server.XDSLimits) { l.Debounce = 0 }, "xDS limits: Debounce must be > 0, got 0s"},
		{"no workers", func(l *server.XDSLimits) { l.GenWorkers = 0 }, "xDS limits: GenWorkers must be > 0, got 0"},
		{"validity too long", func(l *server.XDSLimits) { l.ManifestValidity = 365 * 24 * time.Hour },
			"xDS limits: ManifestValidity 8760h0m0s exceeds 720h0m0s"},
		{"zero current wait", func(l *server.XDSLimits) { l.CurrentWait = 0 }, "xDS limits: CurrentWait must be > 0, got 0s"},
		{"current wait one past its bound", func(l *server.XDSLimits) { l.CurrentWait = meshcache.MaxCurrentWait + time.Nanosecond },
			"xDS limits: CurrentWait 1m0.000000001s exceeds 1m0s"},
		{"identity bounds", func(l *server.XDSLimits) {
			l.MaxStreamsPerIdentity, l.MaxReadOnlyStreams, l.MaxReadOnlySubscriptions, l.MaxResourceNameBytes = 0, 0, 0, 0
		}, "xDS limits: MaxResourceNameBytes must be > 0, got 0\nMaxReadOnlySubscriptions must be > 0, got 0\nMaxStreamsPerIdentity must be > 0, got 0\nMaxReadOnlyStreams must be > 0, got 0"},
		{"registration windows", func(l *server.XDSLimits) { l.RegistrationDebounce, l.RegistrationMaxDelay = 0, -1 },
			"xDS limits: RegistrationDebounce must be > 0, got 0s\nRegistrationMaxDelay must be > 0, got -1ns"},
		{"gRPC buffers", func(l *server.XDSLimits) { l.GRPCReadBufferBytes, l.GRPCWriteBufferBytes = 0, -1 },
			"xDS limits: GRPCReadBufferBytes must be > 0, got 0\nGRPCWriteBufferBytes must be > 0, got -1"},
		{"gRPC windows one under their bound", func(l *server.XDSLimits) {
			l.GRPCStreamWindow, l.GRPCConnWindow = server.MinGRPCWindow-1, server.MinGRPCWindow-1
		}, "xDS limits: GRPCStreamWindow must be >= 65536 (gRPC ignores a smaller window), got 65535\nGRPCConnWindow must be >= 65536 (gRPC ignores a smaller window), got 65535"},
		{"registration TTL one under its bound", func(l *server.XDSLimits) { l.RegistrationTTL = server.MinRegistrationTTL - time.Nanosecond },
			"xDS limits: RegistrationTTL must be between 2s and 5m0s, got 1.999999999s"},
		{"registration TTL one past its bound", func(l *server.XDSLimits) { l.RegistrationTTL = server.MaxRegistrationTTL + time.Nanosecond },
			"xDS limits: RegistrationTTL must be between 2s and 5m0s, got 5m0.000000001s"},
		{"two at once", func(l *server.XDSLimits) { l.MaxUnacked, l.RecvQueue = 0, -1 },
			"xDS limits: MaxUnacked must be > 0, got 0\nRecvQueue must be > 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := server.DefaultXDSLimits()
			tt.edit(&lim)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := server.Run(ctx, server.Config{DataDir: t.TempDir(), AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", XDSTLSAddr: "127.0.0.1:0",
				Logger: hclog.NewNullLogger(), XDS: server.ServeADS(lim)})
			if err == nil || err.Error() != "xDS: "+tt.wantErr {
				t.Errorf("Run error %v, want xDS: %s", err, tt.wantErr)
			}
		})
	}
}

// TestRegistrationTTLBounds: both ends of the registration lease are accepted
// (the cases one past them are in the table above).
func TestRegistrationTTLBounds(t *testing.T) {
	for _, ttl := range []time.Duration{server.MinRegistrationTTL, server.MaxRegistrationTTL} {
		lim := server.DefaultXDSLimits()
		lim.RegistrationTTL = ttl
		if err := server.CheckLimits(lim); err != nil {
			t.Errorf("RegistrationTTL %v: %v, want accepted", ttl, err)
		}
	}
}

// TestSidecarManifest: a Weft sidecar gets, last in every push, a manifest signed
// with the publisher key in pilot's data directory, bound to its node and
// covering exactly what it holds; pilot re-signs at half the validity without
// any store change; a plain xDS client never gets a manifest.
func TestSidecarManifest(t *testing.T) {
	lim := server.DefaultXDSLimits()
	lim.Debounce, lim.MaxDelay, lim.ManifestValidity = 10*time.Millisecond, 100*time.Millisecond, 4*time.Second
	p := servertest.Start(t, servertest.Options{Limits: &lim})
	rev := p.Apply(t, mesh)
	sc := &node.Node{ID: "reviews-1", Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
		Address: "127.0.0.5", InboundPort: 15006}
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sc), Types: snapshot.PushOrder})
	plain := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto((&node.Node{ID: "plain"})),
		Types: []string{snapshot.ClusterType, manifest.TypeURL}, Names: map[string][]string{manifest.TypeURL: {manifest.Name}}})
	synced := func(rev int64) func(status.ProxyStatus) bool {
		return func(ps status.ProxyStatus) bool { return ps.EffectiveRevision >= rev && ps.Status == "SYNCED" }
	}
	p.WaitProxy(t, 10*time.Second, "reviews-1", "sidecar synced", synced(rev))
	p.WaitProxy(t, 10*time.Second, "plain", "plain client synced", synced(rev))
	pub, err := manifest.LoadPublicKey(filepath.Join(p.DataDir, manifest.PublicKeyFile))
	if err != nil {
		t.Fatal(err)
	}

	// verify checks the manifest the client holds against what it holds.
	verify := func() *manifest.Manifest {
		t.Helper()
		have := map[string]map[string][32]byte{}
		var signed []byte
		for _, r := range c.Responses() {
			for n, v := range r.Values {
				if r.TypeURL == manifest.TypeURL {
					signed = v
					continue
				}
				if have[r.TypeURL] == nil {
					have[r.TypeURL] = map[string][32]byte{}
				}
				have[r.TypeURL][n] = manifest.Hash(v)
			}
			for _, n := range r.Removed {
				delete(have[r.TypeURL], n)
			}
		}
		var sm manifestpb.SignedManifest
		if err := proto.Unmarshal(signed, &sm); err != nil {
			t.Fatalf("manifest: %v", err)
		}
		m, err := manifest.Verify(pub, &sm, "reviews-1", time.Now())
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		if err := m.Match(have, manifest.TypeURL); err != nil {
			t.Fatalf("manifest does not cover what the sidecar holds: %v", err)
		}
		return m
	}
	m1 := verify()
	if m1.Revision != rev {
		t.Errorf("manifest revision %d, want %d", m1.Revision, rev)
	}
	// The stream opened after the apply: its binding says so and confirms the
	// content current.
	if !m1.Current || m1.StreamRevision != rev {
		t.Errorf("binding: current %v at stream revision %d, want current at %d", m1.Current, m1.StreamRevision, rev)
	}
	openRev := rev

	// A push: the manifest is its last response.
	n := len(c.Responses())
	rev = p.Apply(t, strings.Replace(mesh[strings.Index(mesh, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Workload"):], "10.0.0.1", "10.0.0.2", 1))
	p.WaitProxy(t, 10*time.Second, "reviews-1", "sidecar synced after the push", synced(rev))
	push := c.Responses()[n:]
	if len(push) < 2 || push[len(push)-1].TypeURL != manifest.TypeURL {
		var got []string
		for _, r := range push {
			got = append(got, r.TypeURL)
		}
		t.Fatalf("push sent %v, want the manifest last", got)
	}
	m2 := verify()
	if m2.Revision != rev {
		t.Errorf("manifest revision %d, want %d", m2.Revision, rev)
	}

	// A revision that changes nothing the sidecar holds (another namespace): it
	// becomes effective at it without a new signature or any response.
	n = len(c.Responses())
	rev = p.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: elsewhere, namespace: other}
spec:
  selector: {app: elsewhere}
  ports:
  - {name: http, port: 80, protocol: HTTP}
`)
	p.WaitProxy(t, 10*time.Second, "reviews-1", "sidecar effective at the unrelated revision", synced(rev))
	// Only the re-sign at half the validity may come meanwhile (it does when
	// the machine is slow enough for 2s to pass since m1 or m2): a manifest
	// with a part signed at least half the validity after the one before.
	resigned := func(prev, next time.Time) bool {
		return next.Equal(prev) || !next.Before(prev.Add(lim.ManifestValidity/2))
	}
	prev := m2
	for _, r := range c.Responses()[n:] {
		var m *manifest.Manifest
		if v, ok := r.Values[manifest.Name]; ok && r.TypeURL == manifest.TypeURL && len(r.Values) == 1 && len(r.Removed) == 0 {
			var sm manifestpb.SignedManifest
			if err := proto.Unmarshal(v, &sm); err != nil {
				t.Fatalf("manifest: %v", err)
			}
			if m, err = manifest.Verify(pub, &sm, "reviews-1", time.Now()); err != nil {
				t.Fatalf("verify: %v", err)
			}
		}
		if m == nil || !resigned(prev.IssuedAt, m.IssuedAt) || !resigned(prev.BindingIssuedAt, m.BindingIssuedAt) ||
			(m.IssuedAt.Equal(prev.IssuedAt) && m.BindingIssuedAt.Equal(prev.BindingIssuedAt)) {
			t.Fatalf("an unrelated revision sent a response (%s %v), want none but re-signs at half the validity", r.TypeURL, r.Names)
		}
		prev = m
	}

	// Re-signed at half the 4s validity with nothing changed in the store: the
	// node's binding at half of its own, the shared content statement (now at
	// the latest revision) at half of its own.
	testkit.Eventually(t, 5*time.Second, "manifest content and binding re-signed", func() bool {
		m3 := verify()
		return m3.IssuedAt.After(m2.IssuedAt) && m3.Revision == rev && m3.BindingIssuedAt.After(m1.BindingIssuedAt) &&
			m3.Current && m3.StreamRevision == openRev
	})

	for _, r := range plain.Responses() {
		if r.TypeURL == manifest.TypeURL && len(r.Names) > 0 {
			t.Errorf("plain client got a manifest: %+v", r)
		}
	}
}

// TestManifestSharedPerScope: sidecars of one scope (same namespace, labels and
// inbound port) get the same signed content statement and each its own binding:
// a manifest verifies for its node only, and it stays a few hundred bytes.
func TestManifestSharedPerScope(t *testing.T) {
	lim := server.DefaultXDSLimits()
	lim.Debounce, lim.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	p := servertest.Start(t, servertest.Options{Limits: &lim})
	rev := p.Apply(t, mesh)
	ids := []string{"reviews-1", "reviews-2"}
	var clients []*servertest.Client
	for i, id := range ids {
		sc := &node.Node{ID: id, Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
			Address: fmt.Sprintf("127.0.0.%d", 5+i), InboundPort: 15006}
		clients = append(clients, servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sc), Types: snapshot.PushOrder}))
	}
	for _, id := range ids {
		p.WaitProxy(t, 10*time.Second, id, "synced", func(ps status.ProxyStatus) bool {
			return ps.EffectiveRevision >= rev && ps.Status == "SYNCED"
		})
	}
	pub, err := manifest.LoadPublicKey(filepath.Join(p.DataDir, manifest.PublicKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var sms []*manifestpb.SignedManifest
	for i, c := range clients {
		var raw []byte
		for _, r := range c.Responses() {
			if v, ok := r.Values[manifest.Name]; ok && r.TypeURL == manifest.TypeURL {
				raw = v
			}
		}
		if len(raw) == 0 || len(raw) > 512 {
			t.Fatalf("%s: manifest of %d bytes, want a few hundred", ids[i], len(raw))
		}
		sm, err := manifest.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		sms = append(sms, sm)
	}
	if !bytes.Equal(sms[0].GetContent(), sms[1].GetContent()) || !bytes.Equal(sms[0].GetContentSignature(), sms[1].GetContentSignature()) {
		t.Error("sidecars of one scope got different content statements")
	}
	if bytes.Equal(sms[0].GetBinding(), sms[1].GetBinding()) {
		t.Error("two nodes got the same binding")
	}
	for i, sm := range sms {
		if _, err := manifest.Verify(pub, sm, ids[i], time.Now()); err != nil {
			t.Errorf("%s: %v", ids[i], err)
		}
		if _, err := manifest.Verify(pub, sm, ids[1-i], time.Now()); !errors.Is(err, manifest.ErrNode) {
			t.Errorf("%s's manifest for %s: %v, want %v", ids[i], ids[1-i], err, manifest.ErrNode)
		}
	}
}

// TestNotCurrentAfterWait: a sidecar that connects after an apply that pilot has
// not compiled yet gets nothing for CurrentWait, then the snapshot pilot has,
// with a binding that says it is not current and names the store revision the
// stream opened at; once the apply is compiled it gets that, confirmed current.
// The test holds pilot's store watch until it has seen the not-current offer, so
// the compile cannot overtake the stream (it did when the order rested on a
// 1.5s debounce against the stream opening on a loaded machine).
func TestNotCurrentAfterWait(t *testing.T) {
	lim := server.DefaultXDSLimits()
	lim.CurrentWait = 300 * time.Millisecond
	held := &heldStore{release: make(chan struct{})}
	p := servertest.Start(t, servertest.Options{Limits: &lim, Store: func(s store.Store) store.Store {
		held.Store = s
		return held
	}})
	var pub ed25519.PublicKey
	testkit.Eventually(t, 10*time.Second, "pilot's publisher key", func() bool {
		var err error
		pub, err = manifest.LoadPublicKey(filepath.Join(p.DataDir, manifest.PublicKeyFile))
		return err == nil
	})
	rev := p.Apply(t, mesh)
	opened := time.Now()
	sc := &node.Node{ID: "reviews-1", Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews"},
		Address: "127.0.0.5", InboundPort: 15006}
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: envoynode.ToProto(sc), Types: snapshot.PushOrder})
	manifests := func() []*manifest.Manifest {
		var out []*manifest.Manifest
		for _, r := range c.Responses() {
			if v, ok := r.Values[manifest.Name]; ok && r.TypeURL == manifest.TypeURL {
				var sm manifestpb.SignedManifest
				if err := proto.Unmarshal(v, &sm); err != nil {
					t.Fatalf("manifest: %v", err)
				}
				m, err := manifest.Verify(pub, &sm, sc.ID, time.Now())
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				out = append(out, m)
			}
		}
		return out
	}
	p.WaitProxy(t, 10*time.Second, sc.ID, "status shows the stream was sent a snapshot not current for it", func(ps status.ProxyStatus) bool {
		return ps.NotCurrent && ps.StreamRevision == rev
	})
	testkit.Eventually(t, 10*time.Second, "a manifest not current", func() bool { return len(manifests()) > 0 })
	close(held.release) // now pilot compiles the apply
	testkit.Eventually(t, 10*time.Second, "a current manifest", func() bool {
		ms := manifests()
		return len(ms) > 0 && ms[len(ms)-1].Current
	})
	p.WaitProxy(t, 10*time.Second, sc.ID, "status shows the stream current", func(ps status.ProxyStatus) bool {
		return !ps.NotCurrent && ps.StreamRevision == rev
	})
	ms := manifests()
	first := c.Responses()[0]
	if waited := first.At.Sub(opened); waited < lim.CurrentWait {
		t.Errorf("first response %v after the stream opened, before CurrentWait %v", waited, lim.CurrentWait)
	}
	if len(ms) < 2 || ms[0].Current || ms[0].StreamRevision != rev || ms[0].Revision >= rev {
		t.Fatalf("first manifest %+v, want revision < %d marked not current at stream revision %d, then a current one", ms[0], rev, rev)
	}
	if last := ms[len(ms)-1]; last.Revision < rev || last.StreamRevision != rev {
		t.Fatalf("current manifest at revision %d (stream revision %d), want >= %d", last.Revision, last.StreamRevision, rev)
	}
}

// heldStore holds back every watch event from pilot's xDS server until release
// is closed, so the test decides when pilot compiles what it applied. Reads
// (List, Revision) pass through.
type heldStore struct {
	store.Store
	release chan struct{}
}

type heldWatcher struct {
	store.Watcher
	ch chan store.Event
}

func (w *heldWatcher) Events() <-chan store.Event { return w.ch }

func (s *heldStore) Watch(ctx context.Context, from store.Revision) (store.Watcher, error) {
	w, err := s.Store.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	h := &heldWatcher{Watcher: w, ch: make(chan store.Event)}
	go func() {
		defer close(h.ch)
		select {
		case <-s.release:
		case <-ctx.Done():
			return
		}
		for ev := range w.Events() { // closed by the store when ctx ends
			select {
			case h.ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return h, nil
}
