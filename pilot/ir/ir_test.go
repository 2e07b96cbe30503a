package ir

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{ServiceHost("reviews", "shop", "cluster.local"), "reviews.shop.svc.cluster.local"},
		{OutboundClusterName(9080, "", "reviews.shop.svc.cluster.local"), "outbound|9080||reviews.shop.svc.cluster.local"},
		{OutboundClusterName(9080, "v1", "reviews.shop.svc.cluster.local"), "outbound|9080|v1|reviews.shop.svc.cluster.local"},
		{InboundClusterName(8080), "inbound|8080||"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestSelects(t *testing.T) {
	labels := map[string]string{"app": "reviews", "version": "v1"}
	tests := []struct {
		name     string
		selector map[string]string
		want     bool
	}{
		{"empty selects nothing", nil, false},
		{"subset", map[string]string{"app": "reviews"}, true},
		{"all", map[string]string{"app": "reviews", "version": "v1"}, true},
		{"value differs", map[string]string{"app": "ratings"}, false},
		{"key missing", map[string]string{"tier": "web"}, false},
	}
	for _, tt := range tests {
		if got := Selects(tt.selector, labels); got != tt.want {
			t.Errorf("%s: Selects = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDerive: each key is built once even under concurrent callers, errors are
// cached like values, and distinct keys do not collide.
func TestDerive(t *testing.T) {
	m := &Mesh{}
	type key string
	var builds atomic.Int32
	var wg sync.WaitGroup
	results := make([]any, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := m.Derive(key("a"), func() (any, error) { builds.Add(1); return "value-a", nil })
			if err != nil {
				t.Error(err)
			}
			results[i] = v
		}()
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("built %d times, want 1", n)
	}
	for i, v := range results {
		if v != "value-a" {
			t.Errorf("caller %d got %v", i, v)
		}
	}
	boom := errors.New("boom")
	for range 2 {
		if _, err := m.Derive(key("b"), func() (any, error) { builds.Add(1); return nil, boom }); !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
	}
	if n := builds.Load(); n != 2 {
		t.Errorf("error result rebuilt: %d builds, want 2", n)
	}
	if v, _ := m.Derive(struct{}{}, func() (any, error) { return 3, nil }); v != 3 {
		t.Errorf("distinct key got %v", v)
	}
}

// fullCluster returns a cluster with every field set, pointers non-nil and one
// labelled endpoint, freshly allocated on each call.
func fullCluster() *Cluster {
	return &Cluster{
		Name: "outbound|80|v1|a.b.svc.cluster.local", Namespace: "b", Service: "a", Port: 80, Subset: "v1", Protocol: ProtocolGRPC,
		Policy: ClusterPolicy{
			LB: LBRingHash, ConnectTimeout: 1,
			Pool:      &ConnectionPool{MaxConnections: 1, MaxPendingRequests: 2, MaxRequests: 3, MaxRetries: 4, RetryBudget: &RetryBudget{Percent: 5, MinConcurrency: 6}},
			Outlier:   &OutlierDetection{Consecutive5xx: 1, ConsecutiveGatewayErrors: 2, ConsecutiveLocalOriginFailures: 3, SuccessRate: &SuccessRate{MinHosts: 1, RequestVolume: 2, StdevFactor: 3}, FailurePercentage: &FailurePercentage{Threshold: 1, MinHosts: 2, RequestVolume: 3}, Interval: 1, BaseEjectionTime: 2, MaxEjectionTime: 3, MaxEjectionTimeJitter: 4, MaxEjectionPercent: 4, MinHealthPercent: 5, SplitExternalLocalOriginErrors: true},
			RateLimit: &LocalRateLimit{RequestsPerSecond: 1, Burst: 2, DryRun: true},
		},
		Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 80, Namespace: "b", ServiceAccount: "sa", Labels: map[string]string{"app": "a"},
			Locality: Locality{Region: "r", Zone: "z", SubZone: "s"}, Weight: 1, Health: HealthHealthy, Source: "Workload/b/w"}},
		Identities: []string{"spiffe://cluster.local/ns/b/sa/sa"},
	}
}

type step struct {
	kind  reflect.Kind
	field int
}

// leaves lists the paths to every exported leaf value of v.
func leaves(v reflect.Value, path []step, out *[][]step) {
	switch v.Kind() {
	case reflect.Pointer:
		leaves(v.Elem(), append(slices.Clone(path), step{kind: reflect.Pointer}), out)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				leaves(v.Field(i), append(slices.Clone(path), step{kind: reflect.Struct, field: i}), out)
			}
		}
	case reflect.Slice:
		leaves(v.Index(0), append(slices.Clone(path), step{kind: reflect.Slice}), out)
	default:
		*out = append(*out, path)
	}
}

func walk(v reflect.Value, path []step) reflect.Value {
	for _, s := range path {
		switch s.kind {
		case reflect.Pointer:
			v = v.Elem()
		case reflect.Struct:
			v = v.Field(s.field)
		case reflect.Slice:
			v = v.Index(0)
		}
	}
	return v
}

// TestClusterSame: Same notices a change in any exported field, so compile can
// never hand a changed cluster's cached wire form to the next mesh. Adding a
// field to Cluster (or anything it holds) without teaching Same fails here.
func TestClusterSame(t *testing.T) {
	if !fullCluster().Same(fullCluster()) {
		t.Fatal("equal clusters are not Same")
	}
	var paths [][]step
	leaves(reflect.ValueOf(fullCluster()), nil, &paths)
	if len(paths) < 40 {
		t.Fatalf("only %d leaves found; the walk is broken", len(paths))
	}
	for _, p := range paths {
		c := fullCluster()
		v := walk(reflect.ValueOf(c), p)
		name := fmt.Sprintf("%v(%s)", p, v.Type())
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Uint32, reflect.Uint64:
			v.SetUint(v.Uint() + 1)
		case reflect.Int64, reflect.Int32, reflect.Int:
			v.SetInt(v.Int() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Map:
			v.SetMapIndex(reflect.ValueOf("new"), reflect.ValueOf("label"))
		default:
			t.Fatalf("%s: no mutation for kind %s", name, v.Kind())
		}
		if c.Same(fullCluster()) || fullCluster().Same(c) {
			t.Errorf("Same misses a change of %s", name)
		}
	}
	// nil vs set pointers differ too.
	c := fullCluster()
	c.Policy.Outlier.SuccessRate = nil
	if c.Same(fullCluster()) {
		t.Error("Same misses a removed SuccessRate")
	}
}

// TestMTLSMode: a selector policy beats the namespace-wide one, which beats the
// mesh default; within a group the first by name wins; other namespaces'
// policies never apply.
func TestMTLSMode(t *testing.T) {
	pa := func(ns, name, mode string, sel map[string]string) *PeerAuthentication {
		return &PeerAuthentication{Namespace: ns, Name: name, MTLS: mode, Selector: sel}
	}
	app := map[string]string{"app": "reviews"}
	tests := []struct {
		name     string
		policies []*PeerAuthentication // sorted by (namespace, name), as compile leaves them
		labels   map[string]string
		want     string
		wantFrom string // "" = mesh default
	}{
		{"mesh default", nil, app, MTLSPermissive, ""},
		{"namespace-wide beats the default", []*PeerAuthentication{pa("shop", "ns", MTLSStrict, nil)}, app, MTLSStrict, "ns"},
		{"selector beats namespace-wide", []*PeerAuthentication{pa("shop", "a", MTLSStrict, nil), pa("shop", "b", MTLSDisable, app)}, app, MTLSDisable, "b"},
		{"selector that does not match", []*PeerAuthentication{pa("shop", "a", MTLSStrict, nil), pa("shop", "b", MTLSDisable, map[string]string{"app": "x"})}, app, MTLSStrict, "a"},
		{"unlabelled workload: only namespace-wide", []*PeerAuthentication{pa("shop", "b", MTLSDisable, app)}, nil, MTLSPermissive, ""},
		{"first selector by name", []*PeerAuthentication{pa("shop", "a", MTLSDisable, app), pa("shop", "b", MTLSStrict, app)}, app, MTLSDisable, "a"},
		{"other namespace ignored", []*PeerAuthentication{pa("other", "a", MTLSDisable, nil), pa("other", "b", MTLSDisable, app)}, app, MTLSPermissive, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Mesh{DefaultMTLS: MTLSPermissive, PeerAuthn: tt.policies}
			m.Index()
			got, from := m.MTLSMode("shop", tt.labels)
			fromName := ""
			if from != nil {
				fromName = from.Name
			}
			if got != tt.want || fromName != tt.wantFrom {
				t.Errorf("MTLSMode = %s from %q, want %s from %q", got, fromName, tt.want, tt.wantFrom)
			}
		})
	}
}

func TestWorkloadID(t *testing.T) {
	if got, want := WorkloadID("example.org", "shop", "reviews"), "spiffe://example.org/ns/shop/sa/reviews"; got != want {
		t.Errorf("WorkloadID = %q, want %q", got, want)
	}
}
