package ir

import (
	"errors"
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
