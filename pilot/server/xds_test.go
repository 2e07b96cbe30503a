package server_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/server/servertest"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
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
	n := (&node.Node{ID: "debugger"}).ToProto()
	c := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: n, Types: types})
	servertest.Eventually(t, 10*time.Second, "first sync", func() bool {
		ps, ok := p.Proxy(t, "debugger")
		return ok && ps.EffectiveRevision >= rev && ps.Status == "SYNCED"
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
	servertest.Eventually(t, 10*time.Second, "pilot compiled the new revision", func() bool { return p.Revision(t, rev).WrittenAt != nil })
	c2 := servertest.Dial(t, p.XDSAddr, servertest.ClientOptions{Delta: true, Node: n, Types: types,
		Initial: map[string]map[string]string{snapshot.ClusterType: cds, snapshot.EndpointType: eds}})
	servertest.Eventually(t, 10*time.Second, "resync", func() bool {
		ps, ok := p.Proxy(t, "debugger")
		return ok && ps.EffectiveRevision >= rev && ps.Status == "SYNCED"
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
		{"two at once", func(l *server.XDSLimits) { l.MaxUnacked, l.RecvQueue = 0, -1 },
			"xDS limits: MaxUnacked must be > 0, got 0\nRecvQueue must be > 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := server.DefaultXDSLimits()
			tt.edit(&lim)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := server.Run(ctx, server.Config{DataDir: t.TempDir(), AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0",
				Logger: hclog.NewNullLogger(), XDS: server.ServeADS(lim)})
			if err == nil || err.Error() != "xDS: "+tt.wantErr {
				t.Errorf("Run error %v, want xDS: %s", err, tt.wantErr)
			}
		})
	}
}
