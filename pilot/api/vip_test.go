package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
)

func serviceDoc(ns, name string, extra string) string {
	return fmt.Sprintf("apiVersion: mesh.weft.dev/v1alpha1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n  ports: [{name: http, port: 80}]\n%s", name, ns, extra)
}

// status is the stored status.addresses of Service ns/name, joined.
func status(t *testing.T, st store.Store, ns, name string) string {
	t.Helper()
	o, err := st.Get(context.Background(), resource.Key{Kind: resource.KindService, Namespace: ns, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if o.Status == nil {
		return ""
	}
	return strings.Join(o.Status.Addresses, ",")
}

// Allocation through the API: lowest free in order, kept on re-apply (no
// change, no new generation), spec.addresses win, a VIP on two Services and
// a user status refused, exhaustion at the range's bound and one past.
func TestVIPAllocation(t *testing.T) {
	f := newFixture(t, api.Config{})
	apply := func(body string) answer { return f.do("POST", applyPath, body, nil) }
	mustOK := func(a answer) {
		t.Helper()
		if a.code != 200 {
			t.Fatalf("apply: %d %s", a.code, a.body)
		}
	}
	mustOK(apply(serviceDoc("shop", "a", "") + "---\n" + serviceDoc("shop", "b", "")))
	if got := status(t, f.st, "shop", "a") + " " + status(t, f.st, "shop", "b"); got != "240.240.0.1 240.240.0.2" {
		t.Fatalf("allocated %q", got)
	}
	rev := f.revision()
	a := apply(serviceDoc("shop", "a", ""))
	mustOK(a)
	var ar api.ApplyResponse
	if err := json.Unmarshal(a.body, &ar); err != nil {
		t.Fatal(err)
	}
	if ar.Changed || f.revision() != rev || ar.Items[0].Status == nil || ar.Items[0].Status.Addresses[0] != "240.240.0.1" {
		t.Fatalf("re-apply: changed=%v revision %d->%d items %s", ar.Changed, rev, f.revision(), a.body)
	}
	// A changed spec keeps the VIP.
	mustOK(apply(strings.Replace(serviceDoc("shop", "a", ""), "port: 80", "port: 81", 1)))
	if got := status(t, f.st, "shop", "a"); got != "240.240.0.1" {
		t.Fatalf("after a spec change: %q", got)
	}
	// spec.addresses: no status; the old VIP is free for the next Service.
	mustOK(apply(serviceDoc("shop", "a", "  addresses: [10.9.0.1]\n")))
	mustOK(apply(serviceDoc("shop", "c", "")))
	if got := status(t, f.st, "shop", "a") + "|" + status(t, f.st, "shop", "c"); got != "|240.240.0.1" {
		t.Fatalf("spec addresses, then c: %q", got)
	}
	if a := apply(serviceDoc("other", "d", "  addresses: [240.240.0.2]\n")); a.code != 400 ||
		!strings.Contains(string(a.body), "Service/shop/b: status.addresses[0]: address 240.240.0.2 is already a VIP of Service other/d") {
		t.Fatalf("VIP of two Services: %d %s", a.code, a.body)
	}
	if a := apply(serviceDoc("shop", "e", "") + "status: {addresses: [240.240.0.9]}\n"); a.code != 400 ||
		!strings.Contains(string(a.body), "Service/shop/e: status: status is set by pilot") {
		t.Fatalf("user status: %d %s", a.code, a.body)
	}

	// A /30 holds two: b's .2 is outside it and stays; xa and ya fill it; z fails.
	mustOK(apply("apiVersion: mesh.weft.dev/v1alpha1\nkind: MeshConfig\nmetadata: {name: default}\nspec: {serviceAddressRange: 10.0.0.0/30}\n"))
	mustOK(apply(serviceDoc("shop", "xa", "") + "---\n" + serviceDoc("shop", "ya", "")))
	if got := status(t, f.st, "shop", "b") + " " + status(t, f.st, "shop", "xa") + " " + status(t, f.st, "shop", "ya"); got != "240.240.0.2 10.0.0.1 10.0.0.2" {
		t.Fatalf("in the /30: %q", got)
	}
	rev = f.revision()
	a = apply(serviceDoc("shop", "z", ""))
	if er := errorsOf(t, a); a.code != 400 || len(er.Errors) != 1 || er.Errors[0] !=
		"Service/shop/z: status.addresses: no free address in serviceAddressRange 10.0.0.0/30 (2 allocatable, all in use): delete a Service, give this one spec.addresses, or widen MeshConfig/default spec.serviceAddressRange" {
		t.Fatalf("exhausted: %d %s", a.code, a.body)
	}
	if f.revision() != rev {
		t.Fatal("a failed allocation wrote")
	}
	// Deleting one frees its address.
	if a := f.do("DELETE", nsPath+"/xa", "", nil); a.code != 200 {
		t.Fatalf("delete: %d %s", a.code, a.body)
	}
	mustOK(apply(serviceDoc("shop", "z", "")))
	if got := status(t, f.st, "shop", "z"); got != "10.0.0.1" {
		t.Fatalf("after a delete: %q", got)
	}
}

// Concurrent applies of different Services through the API never share an
// address.
func TestVIPConcurrentApplies(t *testing.T) {
	f := newFixture(t, api.Config{})
	const n = 40
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			a := f.do("POST", applyPath, serviceDoc("shop", fmt.Sprintf("s%d", i), ""), nil)
			codes[i] = a.code
		})
	}
	wg.Wait()
	seen := map[string]string{}
	for i := range n {
		if codes[i] != 200 {
			t.Fatalf("apply %d: %d", i, codes[i])
		}
		name := fmt.Sprintf("s%d", i)
		addr := status(t, f.st, "shop", name)
		if other, dup := seen[addr]; dup || addr == "" {
			t.Fatalf("%s got %q, as %s did", name, addr, other)
		}
		seen[addr] = name
	}
	// Exactly the n lowest.
	for i := 1; i <= n; i++ {
		if _, ok := seen[fmt.Sprintf("240.240.0.%d", i)]; !ok {
			t.Fatalf("240.240.0.%d not allocated: %v", i, seen)
		}
	}
}

// interloper is a store on which another writer (another pilot on the same
// etcd) commits a Service with the lowest free address just before each of
// the first `moves` conditional applies, so each of those is refused.
type interloper struct {
	*boltstore.Store
	mu    sync.Mutex
	moves int
	n     int
}

func (s *interloper) ApplyAt(ctx context.Context, head store.Revision, muts []store.Mutation) (store.ApplyResult, error) {
	s.mu.Lock()
	if s.n < s.moves {
		s.n++
		o := &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindService,
			Metadata: resource.Metadata{Namespace: "other", Name: fmt.Sprintf("rival-%d", s.n)},
			Spec:     &resource.ServiceSpec{Ports: []resource.ServicePort{{Name: "http", Port: 80, TargetPort: 80, Protocol: "HTTP"}}},
			Status:   &resource.Status{Addresses: []string{fmt.Sprintf("240.240.0.%d", s.n)}}}
		if _, err := s.Store.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: o}}); err != nil {
			s.mu.Unlock()
			return store.ApplyResult{}, err
		}
	}
	s.mu.Unlock()
	return s.Store.ApplyAt(ctx, head, muts)
}

// The head-revision precondition: an apply the store moved under is planned
// again and takes the next free address; MaxApplyAttempts-1 moves still
// succeed (at the bound), MaxApplyAttempts answer 409 and write nothing of
// the apply (one past).
func TestVIPRevisionRetry(t *testing.T) {
	for _, tc := range []struct {
		moves    int
		wantCode int
		want     string
	}{
		{moves: 0, wantCode: 200, want: "240.240.0.1"},
		{moves: api.MaxApplyAttempts - 1, wantCode: 200, want: fmt.Sprintf("240.240.0.%d", api.MaxApplyAttempts)},
		{moves: api.MaxApplyAttempts, wantCode: 409},
	} {
		t.Run(fmt.Sprint(tc.moves), func(t *testing.T) {
			bs, err := boltstore.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			st := &interloper{Store: bs, moves: tc.moves}
			a, err := api.New(api.Config{Store: st, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(a)
			t.Cleanup(func() {
				srv.Close()
				if err := bs.Close(); err != nil {
					t.Error(err)
				}
			})
			f := &fixture{t: t, srv: srv, st: bs}
			ans := f.do("POST", applyPath, serviceDoc("shop", "mine", ""), nil)
			if ans.code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", ans.code, tc.wantCode, ans.body)
			}
			if tc.wantCode != 200 {
				if !strings.Contains(string(ans.body), fmt.Sprintf("the store moved under %d attempts", api.MaxApplyAttempts)) {
					t.Errorf("body %s", ans.body)
				}
				if _, err := bs.Get(context.Background(), resource.Key{Kind: resource.KindService, Namespace: "shop", Name: "mine"}); err == nil {
					t.Error("refused apply wrote its Service")
				}
				return
			}
			if got := status(t, bs, "shop", "mine"); got != tc.want {
				t.Errorf("allocated %q, want %q", got, tc.want)
			}
		})
	}
}

// Services stored without a VIP (before pilot allocated them) get one from
// AllocateStored, in one revision; those with addresses are left alone, and
// a second call does nothing.
func TestAllocateStored(t *testing.T) {
	f := newFixture(t, api.Config{})
	old := func(name string, addrs ...string) store.Mutation {
		return store.Mutation{Op: store.OpPut, Object: &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindService,
			Metadata: resource.Metadata{Namespace: "shop", Name: name},
			Spec:     &resource.ServiceSpec{Ports: []resource.ServicePort{{Name: "http", Port: 80, TargetPort: 80, Protocol: "HTTP"}}, Addresses: addrs}}}
	}
	if _, err := f.st.Apply(context.Background(), []store.Mutation{old("a"), old("b"), old("c", "240.240.0.1")}); err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: f.st, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := a.AllocateStored(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("AllocateStored = %d, %v; want 2", n, err)
	}
	if got := status(t, f.st, "shop", "a") + " " + status(t, f.st, "shop", "b") + " " + status(t, f.st, "shop", "c"); got != "240.240.0.2 240.240.0.3 " {
		t.Fatalf("statuses %q", got)
	}
	if f.revision() != 2 {
		t.Fatalf("revision %d, want 2 (one apply)", f.revision())
	}
	if n, err := a.AllocateStored(context.Background()); n != 0 || err != nil || f.revision() != 2 {
		t.Fatalf("second call: %d, %v, revision %d", n, err, f.revision())
	}
}
