package circuitbreak

import (
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewRejectsZero(t *testing.T) {
	for _, l := range []Limits{{}, {MaxConnections: 1, MaxPendingRequests: 1}, {MaxConnections: 1, MaxRequests: 1}} {
		if _, err := New(l); err == nil {
			t.Errorf("New(%+v): want error", l)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	b, err := New(Limits{MaxConnections: 2, MaxPendingRequests: 1, MaxRequests: 3, MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		op   string
		r    Resource
		want bool
	}{
		{"acq", Connections, true},
		{"acq", Connections, true},
		{"acq", Connections, false},
		{"rel", Connections, true},
		{"acq", Connections, true},
		{"acq", Retries, false}, // MaxRetries 0 means none
		{"acq", Pending, true},
		{"acq", Pending, false},
		{"acq", Requests, true},
	}
	for i, s := range steps {
		if s.op == "rel" {
			b.Release(s.r)
			continue
		}
		if got := b.Acquire(s.r); got != s.want {
			t.Fatalf("step %d: Acquire(%v) = %v, want %v", i, s.r, got, s.want)
		}
	}
	if got := b.InUse(Connections); got != 2 {
		t.Errorf("InUse(connections) = %d, want 2", got)
	}
	if got := b.Overflows(Connections); got != 1 {
		t.Errorf("Overflows(connections) = %d, want 1", got)
	}
	if got := b.Overflows(Retries); got != 1 {
		t.Errorf("Overflows(retries) = %d, want 1", got)
	}
}

func TestConcurrentNeverExceeds(t *testing.T) {
	b, _ := New(Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxSeen := int64(0)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if b.Acquire(Requests) {
					mu.Lock()
					maxSeen = max(maxSeen, b.InUse(Requests))
					mu.Unlock()
					b.Release(Requests)
				}
			}
		}()
	}
	wg.Wait()
	if maxSeen > 5 || b.InUse(Requests) != 0 {
		t.Fatalf("max in use %d (limit 5), final %d", maxSeen, b.InUse(Requests))
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	b, _ := New(Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1})
	defer func() {
		if recover() == nil {
			t.Fatal("want panic")
		}
	}()
	b.Release(Requests)
}
