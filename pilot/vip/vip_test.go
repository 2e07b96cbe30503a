package vip

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func svc(ns, name string, spec []string, status ...string) *resource.Object {
	o := &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindService,
		Metadata: resource.Metadata{Namespace: ns, Name: name},
		Spec:     &resource.ServiceSpec{Ports: []resource.ServicePort{{Name: "http", Port: 80}}, Addresses: spec}}
	if len(status) > 0 {
		o.Status = &resource.Status{Addresses: status}
	}
	return o
}

func mesh(rng string) *resource.Object {
	return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindMeshConfig,
		Metadata: resource.Metadata{Name: "default"}, Spec: &resource.MeshConfigSpec{ServiceAddressRange: rng}}
}

func put(o *resource.Object) store.Mutation { return store.Mutation{Op: store.OpPut, Object: o} }

func del(o *resource.Object) store.Mutation { return store.Mutation{Op: store.OpDelete, Object: o} }

// statuses maps each Service PUT in muts to its status addresses ("-" none).
func statuses(muts []store.Mutation) map[string][]string {
	out := map[string][]string{}
	for _, m := range muts {
		if m.Op != store.OpPut || m.Object.Kind != resource.KindService {
			continue
		}
		if m.Object.Status == nil {
			out[m.Object.Key().String()] = []string{"-"}
			continue
		}
		out[m.Object.Key().String()] = m.Object.Status.Addresses
	}
	return out
}

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current []*resource.Object
		muts    []store.Mutation
		want    map[string][]string
		wantErr string
	}{
		{
			name: "lowest free, network address skipped, in key order",
			muts: []store.Mutation{put(svc("shop", "b", nil)), put(svc("shop", "a", nil))},
			want: map[string][]string{"Service/shop/a": {"240.240.0.1"}, "Service/shop/b": {"240.240.0.2"}},
		},
		{
			name:    "stored status kept; addresses in use (spec or status) skipped",
			current: []*resource.Object{svc("shop", "a", nil, "240.240.0.7"), svc("shop", "b", []string{"240.240.0.1"}), svc("shop", "c", nil, "240.240.0.2")},
			muts:    []store.Mutation{put(svc("shop", "a", nil)), put(svc("shop", "d", nil))},
			want:    map[string][]string{"Service/shop/a": {"240.240.0.7"}, "Service/shop/d": {"240.240.0.3"}},
		},
		{
			name:    "spec.addresses clear the status and free it",
			current: []*resource.Object{svc("shop", "a", nil, "240.240.0.1")},
			muts:    []store.Mutation{put(svc("shop", "a", []string{"10.0.0.1"})), put(svc("shop", "z", nil))},
			want:    map[string][]string{"Service/shop/a": {"-"}, "Service/shop/z": {"240.240.0.1"}},
		},
		{
			name:    "a deleted Service's address is free again",
			current: []*resource.Object{svc("shop", "a", nil, "240.240.0.1")},
			muts:    []store.Mutation{del(svc("shop", "a", nil)), put(svc("shop", "b", nil))},
			want:    map[string][]string{"Service/shop/b": {"240.240.0.1"}},
		},
		{
			name:    "the range of the MeshConfig in the same apply",
			current: []*resource.Object{mesh("10.1.0.0/16")},
			muts:    []store.Mutation{put(mesh("10.9.0.0/24")), put(svc("shop", "a", nil))},
			want:    map[string][]string{"Service/shop/a": {"10.9.0.1"}},
		},
		{
			name:    "a range change moves no allocated VIP",
			current: []*resource.Object{mesh("10.9.0.0/24"), svc("shop", "a", nil, "240.240.0.9")},
			muts:    []store.Mutation{put(svc("shop", "a", nil))},
			want:    map[string][]string{"Service/shop/a": {"240.240.0.9"}},
		},
		{
			name:    "exhausted: /30 gives two",
			current: []*resource.Object{mesh("10.0.0.0/30"), svc("shop", "a", nil, "10.0.0.1")},
			muts:    []store.Mutation{put(svc("shop", "b", nil)), put(svc("shop", "c", nil))},
			wantErr: "Service/shop/c: status.addresses: no free address in serviceAddressRange 10.0.0.0/30 (2 allocatable, all in use): delete a Service, give this one spec.addresses, or widen MeshConfig/default spec.serviceAddressRange",
		},
		{
			name:    "not a Service: untouched",
			current: []*resource.Object{},
			muts:    []store.Mutation{put(mesh("10.0.0.0/30"))},
			want:    map[string][]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cmp.Diff(nil, tc.muts) // inputs must not be written
			got, err := Assign(tc.current, tc.muts)
			if tc.wantErr != "" {
				var el resource.ErrorList
				if err == nil || err.Error() != tc.wantErr || !errors.As(err, &el) {
					t.Fatalf("err = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, statuses(got)); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			if after := cmp.Diff(nil, tc.muts); after != before {
				t.Error("Assign changed its input")
			}
		})
	}
}

// The range's bound: a /30 allocates exactly two (at the bound), not a third
// (one past); a /24 254, a /29 6.
func TestExhaustionBound(t *testing.T) {
	for _, tc := range []struct {
		rng string
		n   int
	}{{"10.0.0.0/30", 2}, {"10.0.0.0/24", 254}, {"10.0.0.0/29", 6}} {
		t.Run(tc.rng, func(t *testing.T) {
			var current []*resource.Object
			current = append(current, mesh(tc.rng))
			for i := range tc.n {
				muts, err := Assign(current, []store.Mutation{put(svc("ns", "s"+string(rune('a'+i%26))+string(rune('a'+i/26)), nil))})
				if err != nil {
					t.Fatalf("service %d of %d: %v", i+1, tc.n, err)
				}
				current = append(current, muts[0].Object)
			}
			_, err := Assign(current, []store.Mutation{put(svc("ns", "one-past", nil))})
			if err == nil {
				t.Fatalf("service %d allocated from %s", tc.n+1, tc.rng)
			}
			if got := Allocatable(netip.MustParsePrefix(tc.rng)); got != uint64(tc.n) {
				t.Errorf("Allocatable = %d, want %d", got, tc.n)
			}
		})
	}
}

func TestLowestFree(t *testing.T) {
	used := func(as ...string) map[netip.Addr]bool {
		m := map[netip.Addr]bool{}
		for _, a := range as {
			m[netip.MustParseAddr(a)] = true
		}
		return m
	}
	for _, tc := range []struct {
		rng  string
		used map[netip.Addr]bool
		want string // "" none
	}{
		{"240.240.0.0/16", nil, "240.240.0.1"},
		{"240.240.0.0/16", used("240.240.0.1", "240.240.0.3"), "240.240.0.2"},
		{"240.240.0.0/16", used("240.240.0.1", "240.240.0.2"), "240.240.0.3"},
		{"10.0.0.0/30", used("10.0.0.1"), "10.0.0.2"},
		{"10.0.0.0/30", used("10.0.0.1", "10.0.0.2"), ""}, // .3 is the broadcast
		{"10.0.0.0/31", nil, ""},
		{"10.0.0.0/24", used("10.0.0.254"), "10.0.0.1"},
		{"10.0.0.0/23", used("10.0.0.1"), "10.0.0.2"},
	} {
		got, ok := LowestFree(netip.MustParsePrefix(tc.rng), tc.used)
		if tc.want == "" {
			if ok {
				t.Errorf("%s: %s, want none", tc.rng, got)
			}
			continue
		}
		if !ok || got.String() != tc.want {
			t.Errorf("%s used %v: %v %v, want %s", tc.rng, tc.used, got, ok, tc.want)
		}
	}
	// 10.0.0.255 is a host in a /23 (10.0.1.255 is its broadcast).
	all := map[netip.Addr]bool{}
	for a := netip.MustParseAddr("10.0.0.1"); a != netip.MustParseAddr("10.0.0.255"); a = a.Next() {
		all[a] = true
	}
	if got, _ := LowestFree(netip.MustParsePrefix("10.0.0.0/23"), all); got.String() != "10.0.0.255" {
		t.Errorf("/23: %v, want 10.0.0.255", got)
	}
}
