package overload_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/overload"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLimitAtBoundAndOnePast(t *testing.T) {
	l, err := overload.NewLimit("requests", 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !l.Acquire() {
			t.Fatalf("acquire %d of 3 refused", i+1)
		}
	}
	if l.Acquire() {
		t.Fatal("4th acquire of a limit of 3 admitted")
	}
	if got, want := [3]any{l.Current(), l.Max(), l.Refused()}, [3]any{int64(3), int64(3), uint64(1)}; got != want {
		t.Fatalf("current, max, refused = %v, want %v", got, want)
	}
	l.Release()
	if !l.Acquire() {
		t.Fatal("acquire after a release refused")
	}
}

func TestLimitConcurrentNeverPastMax(t *testing.T) {
	l, err := overload.NewLimit("conns", 8)
	if err != nil {
		t.Fatal(err)
	}
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if l.Acquire() {
					n := held.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					held.Add(-1)
					l.Release()
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 8 || p < 1 {
		t.Fatalf("peak holders %d, want 1..8", p)
	}
	if l.Current() != 0 {
		t.Fatalf("current %d after all released", l.Current())
	}
}

func TestNilLimitIsUnlimited(t *testing.T) {
	var l *overload.Limit
	if !l.Acquire() || l.Max() != 0 || l.Current() != 0 || l.Refused() != 0 || l.Name() != "" {
		t.Fatal("nil limit must admit and count nothing")
	}
	l.Release()
}

func TestNewLimitChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		ok   bool
	}{
		{"a", 1, true}, {"a", overload.MaxLimit, true}, {"a", 0, false}, {"a", overload.MaxLimit + 1, false}, {"", 5, false},
	} {
		_, err := overload.NewLimit(tc.name, tc.max)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, overload.ErrConfig)) {
			t.Errorf("NewLimit(%q, %d) = %v, want ok=%v", tc.name, tc.max, err, tc.ok)
		}
	}
}

func TestNewMemoryChecks(t *testing.T) {
	ok := overload.MemoryConfig{Limit: 256 << 20, HighWater: 0.9}
	for _, tc := range []struct {
		name string
		edit func(*overload.MemoryConfig)
		ok   bool
	}{
		{"defaults", func(*overload.MemoryConfig) {}, true},
		{"min limit", func(c *overload.MemoryConfig) { c.Limit = overload.MinMemoryLimit }, true},
		{"below min limit", func(c *overload.MemoryConfig) { c.Limit = overload.MinMemoryLimit - 1 }, false},
		{"max limit", func(c *overload.MemoryConfig) { c.Limit = overload.MaxMemoryLimit }, true},
		{"above max limit", func(c *overload.MemoryConfig) { c.Limit = overload.MaxMemoryLimit + 1 }, false},
		{"high water 1", func(c *overload.MemoryConfig) { c.HighWater = 1 }, true},
		{"high water above 1", func(c *overload.MemoryConfig) { c.HighWater = 1.01 }, false},
		{"high water min", func(c *overload.MemoryConfig) { c.HighWater = overload.MinHighWater }, true},
		{"high water below min", func(c *overload.MemoryConfig) { c.HighWater = 0.09 }, false},
		{"high water NaN", func(c *overload.MemoryConfig) { c.HighWater = math.NaN() }, false},
		{"interval min", func(c *overload.MemoryConfig) { c.Interval = overload.MinMemoryInterval }, true},
		{"interval below min", func(c *overload.MemoryConfig) { c.Interval = overload.MinMemoryInterval - 1 }, false},
		{"interval max", func(c *overload.MemoryConfig) { c.Interval = overload.MaxMemoryInterval }, true},
		{"interval above max", func(c *overload.MemoryConfig) { c.Interval = overload.MaxMemoryInterval + 1 }, false},
	} {
		c := ok
		tc.edit(&c)
		_, err := overload.NewMemory(c)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, overload.ErrConfig)) {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// Shedding starts at the high-water mark (not one byte below) and stops only
// MemoryHysteresis below it.
func TestMemorySheddingThresholds(t *testing.T) {
	var used atomic.Uint64
	m, err := overload.NewMemory(overload.MemoryConfig{Limit: 100 << 20, HighWater: 0.5, Read: used.Load})
	if err != nil {
		t.Fatal(err)
	}
	high := m.HighWater()
	if high != 50<<20 {
		t.Fatalf("high water %d, want %d", high, 50<<20)
	}
	low := high - uint64(float64(m.Limit())*overload.MemoryHysteresis)
	for _, step := range []struct {
		used uint64
		shed bool
	}{
		{high - 1, false}, {high, true}, {high - 1, true}, {low, true}, {low - 1, false}, {high + 1, true},
	} {
		used.Store(step.used)
		m.Sample()
		if m.Shedding() != step.shed || m.Used() != step.used {
			t.Fatalf("used %d: shedding %v (sampled %d), want %v", step.used, m.Shedding(), m.Used(), step.shed)
		}
	}
}

func TestMemoryRunSamples(t *testing.T) {
	var used atomic.Uint64
	m, err := overload.NewMemory(overload.MemoryConfig{Limit: 64 << 20, HighWater: 0.9, Interval: time.Millisecond, Read: used.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	used.Store(64 << 20)
	testkit.Eventually(t, 5*time.Second, "shedding after use reached the limit", m.Shedding)
	used.Store(1 << 20)
	testkit.Eventually(t, 5*time.Second, "shedding stopped after use fell", func() bool { return !m.Shedding() })
}

func TestMemoryRuntimeReaderReadsSomething(t *testing.T) {
	m, err := overload.NewMemory(overload.MemoryConfig{Limit: overload.MinMemoryLimit, HighWater: 1})
	if err != nil {
		t.Fatal(err)
	}
	if u := m.Used(); u < 1<<20 || u > 1<<40 {
		t.Fatalf("runtime memory in use %d bytes: implausible", u)
	}
	var nilMem *overload.Memory
	if nilMem.Shedding() {
		t.Fatal("nil Memory sheds")
	}
}

// While shedding, a GC at most every MemoryGCInterval: the reading after it decides.
func TestMemoryCollectsWhileShedding(t *testing.T) {
	var used atomic.Uint64
	now := time.Unix(0, 0)
	gcs := 0
	m, err := overload.NewMemory(overload.MemoryConfig{Limit: 100 << 20, HighWater: 0.5, Read: used.Load,
		GC: func() { gcs++; used.Store(1 << 20) }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	used.Store(60 << 20)
	m.Sample() // not yet shedding: no GC
	if !m.Shedding() || gcs != 0 {
		t.Fatalf("shedding %v after %d GCs, want true after 0", m.Shedding(), gcs)
	}
	now = now.Add(overload.MemoryGCInterval)
	used.Store(60 << 20)
	m.Sample() // shedding: GC, and the garbage was all it was
	if m.Shedding() || gcs != 1 || m.Used() != 1<<20 {
		t.Fatalf("after GC: shedding %v, %d GCs, used %d", m.Shedding(), gcs, m.Used())
	}
	used.Store(60 << 20)
	m.Sample()
	now = now.Add(overload.MemoryGCInterval - 1)
	m.Sample() // within the interval: no second GC
	if !m.Shedding() || gcs != 1 {
		t.Fatalf("shedding %v after %d GCs, want true after 1", m.Shedding(), gcs)
	}
}

// Committed memory counts on top of the sample at once (no sample needed), at
// the high-water mark and not one byte below, and in Sample's hysteresis.
func TestMemoryCommittedCountsAtOnce(t *testing.T) {
	var used atomic.Uint64
	used.Store(30 << 20)
	m, err := overload.NewMemory(overload.MemoryConfig{Limit: 100 << 20, HighWater: 0.5, Read: used.Load, GC: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	high, low := m.HighWater(), m.HighWater()-uint64(float64(m.Limit())*overload.MemoryHysteresis)
	for i, step := range []struct {
		commit int64 // Commit's argument
		sample bool  // then Sample
		shed   bool
	}{
		{0, false, false},
		{int64(high-30<<20) - 1, false, false}, // one byte below the mark
		{1, false, true},                       // at it: before any sample
		{-1, false, false},                     // released: the sample alone said nothing
		{1, true, true},                        // sampled at the mark: shedding latched
		{-int64(high - low), true, true},       // at the low mark: still shedding
		{-1, true, false},                      // below it: stops
		{-int64(high), false, false},           // more released than committed reads as 0
	} {
		m.Commit(step.commit)
		if step.sample {
			m.Sample()
		}
		if got := m.Shedding(); got != step.shed {
			t.Errorf("step %d: committed %d, used %d: Shedding = %v, want %v", i, m.Committed(), m.Used(), got, step.shed)
		}
	}
	if m.Committed() != 0 {
		t.Errorf("Committed = %d after releasing more than committed, want 0", m.Committed())
	}
	var nilMem *overload.Memory
	nilMem.Commit(1 << 30)
	if nilMem.Shedding() || nilMem.Committed() != 0 {
		t.Error("a nil Memory sheds or counts commitments")
	}
}
