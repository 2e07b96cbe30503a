// Package storetest is the contract every store.Store backend must pass: call Run
// (and RunPersistent for backends that keep data across restarts) from the
// backend's tests. Stores must also implement store.Compactor and
// store.WatchBufferer, with a watch buffer of at most MaxSuiteWatchBuffer so the
// suite can overflow it quickly.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// MaxSuiteWatchBuffer is the largest watch buffer the suite accepts.
const MaxSuiteWatchBuffer = 256

// waitTimeout bounds every wait for an event or a closed channel.
const waitTimeout = 10 * time.Second

// Service builds a realistic Service with two ports; n varies the spec.
func Service(ns, name string, n int32) *resource.Object {
	return &resource.Object{
		APIVersion: resource.APIVersion,
		Kind:       resource.KindService,
		Metadata:   resource.Metadata{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: &resource.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports: []resource.ServicePort{
				{Name: "http", Port: 80 + n, TargetPort: 8080, Protocol: "HTTP"},
				{Name: "grpc", Port: 9090, TargetPort: 9090, Protocol: "GRPC"},
			},
		},
	}
}

func route(ns, name, svc string) *resource.Object {
	return &resource.Object{
		APIVersion: resource.APIVersion,
		Kind:       resource.KindRoute,
		Metadata:   resource.Metadata{Name: name, Namespace: ns},
		Spec: &resource.RouteSpec{
			Hosts: []string{svc},
			HTTP: []resource.HTTPRoute{{
				Route:   []resource.RouteDestination{{Destination: resource.Destination{Service: svc}, Weight: 100}},
				Timeout: "2s",
			}},
		},
	}
}

func meshConfig() *resource.Object {
	return &resource.Object{
		APIVersion: resource.APIVersion,
		Kind:       resource.KindMeshConfig,
		Metadata:   resource.Metadata{Name: "mesh"},
		Spec:       &resource.MeshConfigSpec{TrustDomain: "cluster.local"},
	}
}

// withStatus sets o's pilot-written status addresses (issue #10's VIPs).
func withStatus(o *resource.Object, addrs ...string) *resource.Object {
	o.Status = &resource.Status{Addresses: addrs}
	return o
}

func put(o *resource.Object) store.Mutation { return store.Mutation{Op: store.OpPut, Object: o} }

func putIf(o *resource.Object, gen int64) store.Mutation {
	return store.Mutation{Op: store.OpPut, Object: o, IfMatch: &gen}
}

func del(k resource.Key) store.Mutation {
	return store.Mutation{Op: store.OpDelete, Object: &resource.Object{Kind: k.Kind, Metadata: resource.Metadata{Namespace: k.Namespace, Name: k.Name}}}
}

func delIf(k resource.Key, gen int64) store.Mutation {
	m := del(k)
	m.IfMatch = &gen
	return m
}

func key(o *resource.Object) resource.Key { return o.Key() }

// withLabel returns a copy of o with one more label.
func withLabel(o *resource.Object, k, v string) *resource.Object {
	c := *o
	c.Metadata.Labels = map[string]string{k: v}
	for lk, lv := range o.Metadata.Labels {
		c.Metadata.Labels[lk] = lv
	}
	return &c
}

func mustApply(t *testing.T, s store.Store, muts ...store.Mutation) store.ApplyResult {
	t.Helper()
	res, err := s.Apply(context.Background(), muts)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func mustRevision(t *testing.T, s store.Store) store.Revision {
	t.Helper()
	r, err := s.Revision(context.Background())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return r
}

func mustHistory(t *testing.T, s store.Store, k resource.Key) []store.Event {
	t.Helper()
	h, err := s.History(context.Background(), k)
	if err != nil {
		t.Fatalf("History(%s): %v", k, err)
	}
	return h
}

func mustGet(t *testing.T, s store.Store, k resource.Key) *resource.Object {
	t.Helper()
	o, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	return o
}

func mustWatch(t *testing.T, ctx context.Context, s store.Store, from store.Revision) store.Watcher {
	t.Helper()
	w, err := s.Watch(ctx, from)
	if err != nil {
		t.Fatalf("Watch(%d): %v", from, err)
	}
	return w
}

// collect reads exactly n events, failing on a closed channel or the deadline.
func collect(t *testing.T, w store.Watcher, n int) []store.Event {
	t.Helper()
	out := make([]store.Event, 0, n)
	deadline := time.After(waitTimeout)
	for len(out) < n {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch closed after %d of %d events: %v", len(out), n, w.Err())
			}
			out = append(out, ev)
		case <-deadline:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

// drainUntilClosed reads until the channel closes (or the deadline) and returns
// what it read.
func drainUntilClosed(t *testing.T, w store.Watcher) []store.Event {
	t.Helper()
	var out []store.Event
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-deadline:
			t.Fatalf("watch channel not closed before deadline (read %d events)", len(out))
		}
	}
}

func wantErrIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want errors.Is %v", what, err, want)
	}
}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func closeStore(t *testing.T, s store.Store) {
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
}
