package circuitbreak

import "testing"

// The request path's breaker checks: one admission and its release per request
// (Requests), per retry (Retries, with the budget computed inside), and a refusal.
// All must be allocation-free; TestAdmitAllocatesNothing enforces it.

func benchBreaker(b *testing.B, l Limits) *Breaker {
	br, err := New(l)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	return br
}

var wide = Limits{MaxConnections: 1 << 30, MaxPendingRequests: 1 << 30, MaxRequests: 1 << 30, MaxRetries: 1 << 30}

func BenchmarkAdmitRequest(b *testing.B) {
	br := benchBreaker(b, wide)
	for b.Loop() {
		if !br.Acquire(Requests) {
			b.Fatal("refused")
		}
		br.Release(Requests)
	}
}

func BenchmarkAdmitRetryBudget(b *testing.B) {
	l := wide
	l.Budget = &Budget{Percent: 20, MinConcurrency: 3}
	br := benchBreaker(b, l)
	for range 100 {
		br.Acquire(Requests) // the budget allows 20 retries
	}
	for b.Loop() {
		if !br.Acquire(Retries) {
			b.Fatal("refused")
		}
		br.Release(Retries)
	}
}

func BenchmarkAdmitRefused(b *testing.B) {
	br := benchBreaker(b, Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1})
	br.Acquire(Requests)
	for b.Loop() {
		if _, ok := br.Admit(Requests); ok {
			b.Fatal("admitted")
		}
	}
}

// Every core contending on one Service's breaker (the CAS loop under load).
func BenchmarkAdmitRequestParallel(b *testing.B) {
	br := benchBreaker(b, wide)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !br.Acquire(Requests) {
				b.Error("refused")
				return
			}
			br.Release(Requests)
		}
	})
}

func TestAdmitAllocatesNothing(t *testing.T) {
	l := wide
	l.Budget = &Budget{Percent: 20, MinConcurrency: 3}
	br, _ := New(l)
	tight, _ := New(Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1})
	tight.Acquire(Pending)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"request", func() { br.Acquire(Requests); br.Release(Requests) }},
		{"retry with budget", func() { br.Acquire(Retries); br.Release(Retries) }},
		{"refused", func() { tight.Admit(Pending); tight.TryAcquire(Pending) }},
	} {
		if n := testing.AllocsPerRun(1000, c.f); n != 0 {
			t.Errorf("%s: %v allocations per admission, want 0", c.name, n)
		}
	}
}
