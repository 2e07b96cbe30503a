package circuitbreak

import (
	"math"
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
	if got := b.Overflows(MaxConnections); got != 1 {
		t.Errorf("Overflows(connections) = %d, want 1", got)
	}
	if got := b.Overflows(MaxRetries); got != 1 {
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

func TestSetLimitsKeepsCounts(t *testing.T) {
	b, _ := New(Limits{MaxConnections: 4, MaxPendingRequests: 1, MaxRequests: 4})
	for range 3 {
		if !b.Acquire(Requests) {
			t.Fatal("acquire under the limit refused")
		}
	}
	// Raised: counts stay, one more fits up to the new limit.
	if err := b.SetLimits(Limits{MaxConnections: 4, MaxPendingRequests: 1, MaxRequests: 5}); err != nil {
		t.Fatal(err)
	}
	if got := b.InUse(Requests); got != 3 {
		t.Fatalf("in use after SetLimits = %d, want 3", got)
	}
	for i, want := range []bool{true, true, false} {
		if got := b.Acquire(Requests); got != want {
			t.Fatalf("admission %d at limit 5 with 3 in use: %v, want %v", i, got, want)
		}
	}
	// Lowered below what is in use (5): nothing is revoked, nothing panics, and
	// admissions wait until releases bring the count below the new limit (2).
	if err := b.SetLimits(Limits{MaxConnections: 4, MaxPendingRequests: 1, MaxRequests: 2}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		release bool
		want    bool // of the Acquire that follows
		inUse   int64
	}{
		{release: false, want: false, inUse: 5},
		{release: true, want: false, inUse: 4},  // released to 4: still ≥ 2, refused
		{release: true, want: false, inUse: 3},  // released to 3: refused
		{release: true, want: false, inUse: 2},  // released to 2: 2 ≥ 2, refused
		{release: true, want: true, inUse: 2},   // released to 1 < 2: admitted, back to 2
		{release: false, want: false, inUse: 2}, // at the limit exactly
	}
	for i, s := range steps {
		if s.release {
			b.Release(Requests)
		}
		if got := b.Acquire(Requests); got != s.want {
			t.Fatalf("step %d: Acquire = %v, want %v", i, got, s.want)
		}
		if got := b.InUse(Requests); got != s.inUse {
			t.Fatalf("step %d: in use %d, want %d", i, got, s.inUse)
		}
	}
	for b.InUse(Requests) > 0 {
		b.Release(Requests)
	}
	if err := b.SetLimits(Limits{}); err == nil {
		t.Error("SetLimits accepted zero limits")
	}
	if got := b.Limits().MaxRequests; got != 2 {
		t.Errorf("a refused SetLimits changed the limits: max requests %d", got)
	}
}

func TestAdmitNamesLimit(t *testing.T) {
	b, _ := New(Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1, MaxRetries: 1})
	for _, tc := range []struct {
		r    Resource
		want Limit
	}{{Connections, MaxConnections}, {Pending, MaxPendingRequests}, {Requests, MaxRequests}, {Retries, MaxRetries}} {
		if _, ok := b.Admit(tc.r); !ok {
			t.Fatalf("first %v refused", tc.r)
		}
		if got, ok := b.Admit(tc.r); ok || got != tc.want {
			t.Errorf("second %v: (%v, %v), want (%v, false)", tc.r, got, ok, tc.want)
		}
		if got := b.Overflows(tc.want); got != 1 {
			t.Errorf("overflows of %v = %d, want 1", tc.want, got)
		}
	}
	// TryAcquire does not count; CountOverflow does.
	if _, ok := b.TryAcquire(Connections); ok {
		t.Fatal("TryAcquire over the limit admitted")
	}
	if got := b.Overflows(MaxConnections); got != 1 {
		t.Errorf("TryAcquire counted an overflow: %d", got)
	}
	b.CountOverflow(MaxConnections)
	if got := b.Overflows(MaxConnections); got != 2 {
		t.Errorf("CountOverflow: %d, want 2", got)
	}
	names := []string{"maxConnections", "maxPendingRequests", "maxRequests", "maxRetries", "retryBudget"}
	for l := range NumLimits {
		if l.String() != names[l] {
			t.Errorf("Limit %d = %q, want %q", l, l, names[l])
		}
	}
}

// BudgetAllowed: floor(percent × active / 100), at least minConcurrency.
func TestBudgetAllowed(t *testing.T) {
	for _, tc := range []struct {
		pct    float64
		min    uint32
		active int64
		want   int64
	}{
		{20, 3, 0, 3},    // nothing active: the minimum
		{20, 3, 15, 3},   // 3.0 = min
		{20, 3, 19, 3},   // 3.8 rounds down to 3
		{20, 3, 20, 4},   // 4.0 exactly
		{20, 3, 24, 4},   // 4.8 → 4
		{20, 3, 25, 5},   // 5.0
		{20, 0, 4, 0},    // 0.8 → 0, no minimum
		{20, 0, 5, 1},    // 1.0
		{29, 0, 100, 29}, // exact: 0.29×100 would give 28.99…
		{7, 0, 100, 7},   // exact
		{33.3, 0, 3, 0},  // 0.999 → 0
		{33.4, 0, 3, 1},  // 1.002 → 1
		{100, 0, 7, 7},   // all of them
		{0, 2, 1000, 2},  // 0%: only the minimum
		{20, 3, -5, 3},   // a negative count (never) is treated as 0
		{50, 1, 1 << 40, 1 << 39},
	} {
		if got := BudgetAllowed(tc.pct, tc.min, tc.active); got != tc.want {
			t.Errorf("BudgetAllowed(%v%%, min %d, active %d) = %d, want %d", tc.pct, tc.min, tc.active, got, tc.want)
		}
	}
}

// Retries are admitted below min(maxRetries, budget(active requests + pending)).
func TestRetryBudgetAdmission(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		maxRetries               uint32
		budget                   *Budget
		requests, pending, retry int // in use before the retry
		want                     bool
		refused                  Limit
	}{
		{"no budget, below max", 3, nil, 100, 0, 2, true, 0},
		{"no budget, at max", 3, nil, 100, 0, 3, false, MaxRetries},
		{"budget min, idle", 10, &Budget{20, 3}, 0, 0, 2, true, 0},
		{"budget min reached", 10, &Budget{20, 3}, 0, 0, 3, false, RetryBudget},
		{"budget at bound", 100, &Budget{20, 3}, 50, 0, 9, true, 0}, // 20% of 50 = 10 allowed
		{"budget one past", 100, &Budget{20, 3}, 50, 0, 10, false, RetryBudget},
		{"pending counts", 100, &Budget{20, 3}, 40, 10, 9, true, 0}, // 20% of 50 = 10
		{"pending counts, past", 100, &Budget{20, 3}, 40, 10, 10, false, RetryBudget},
		{"max retries caps the budget", 5, &Budget{20, 3}, 100, 0, 5, false, MaxRetries}, // budget 20, max 5
		{"max retries caps, below", 5, &Budget{20, 3}, 100, 0, 4, true, 0},
		{"equal: named maxRetries", 4, &Budget{20, 3}, 20, 0, 4, false, MaxRetries},
		{"0% budget, min 0", 10, &Budget{0, 0}, 100, 0, 0, false, RetryBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Limits{MaxConnections: 1, MaxPendingRequests: 1000, MaxRequests: 1000, MaxRetries: tc.maxRetries, Budget: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			for range tc.requests {
				b.Acquire(Requests)
			}
			for range tc.pending {
				b.Acquire(Pending)
			}
			for range tc.retry {
				if _, ok := b.TryAcquire(Retries); !ok {
					t.Fatal("setup: retry refused")
				}
			}
			got, ok := b.Admit(Retries)
			if ok != tc.want || (!ok && got != tc.refused) {
				t.Errorf("Admit(Retries) = (%v, %v), want (%v, %v)", got, ok, tc.refused, tc.want)
			}
		})
	}
}

func TestLimitsCheckAndEqual(t *testing.T) {
	ok := Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1}
	for _, tc := range []struct {
		pct  float64
		good bool
	}{{0, true}, {100, true}, {100.0001, false}, {-0.1, false}, {math.NaN(), false}} {
		l := ok
		l.Budget = &Budget{Percent: tc.pct}
		if err := l.Check(); (err == nil) != tc.good {
			t.Errorf("budget %v%%: Check() = %v", tc.pct, err)
		}
	}
	a, b := ok, ok
	a.Budget, b.Budget = &Budget{20, 3}, &Budget{20, 3}
	if !a.Equal(b) || a.Equal(ok) || ok.Equal(a) || !ok.Equal(ok) {
		t.Error("Equal compares budgets wrongly")
	}
	b.Budget.MinConcurrency = 4
	if a.Equal(b) {
		t.Error("different budgets are equal")
	}
	// The breaker keeps its own copy of the budget.
	br, _ := New(a)
	a.Budget.Percent = 90
	if br.Limits().Budget.Percent != 20 {
		t.Error("the caller's budget changed the breaker's")
	}
}
