package meshcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/tools/testkit"
)

// TestDebouncer walks the pure debouncer step by step: store changes wait for
// Debounce of quiet up to MaxDelay; registrations for their own, wider
// window; a mixed burst compiles at the earlier deadline; Fire clears it.
func TestDebouncer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type step struct {
		at      int    // ms after t0
		op      string // store, reg, fire, or "" (only check)
		due     int    // ms after t0; -1: nothing pending
		comment string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one store change waits the quiet period", []step{
			{0, "store", 100, ""},
			{100, "fire", -1, "compiled: nothing pending"},
		}},
		{"store changes extend the quiet period up to MaxDelay", []step{
			{0, "store", 100, ""},
			{90, "store", 190, ""},
			{950, "store", 1000, "MaxDelay after the first change: at the bound"},
			{999, "store", 1000, "one before the bound: still the bound"},
			{1000, "fire", -1, ""},
			{1001, "store", 1101, "a new burst starts its own MaxDelay"},
		}},
		{"one registration waits its own quiet period", []step{
			{0, "reg", 250, ""},
			{250, "fire", -1, ""},
		}},
		{"a stream of registrations compiles once per RegistrationMaxDelay", []step{
			{0, "reg", 250, ""},
			{200, "reg", 450, ""},
			{2900, "reg", 3000, "bounded by RegistrationMaxDelay from the first"},
			{3000, "fire", -1, ""},
			{3010, "reg", 3260, "the next window"},
		}},
		{"a store change during registrations compiles at its own deadline", []step{
			{0, "reg", 250, ""},
			{100, "store", 200, "the store's quiet period is the earlier deadline"},
			{200, "fire", -1, "both compiled together"},
		}},
		{"registrations during a store burst do not delay it", []step{
			{0, "store", 100, ""},
			{50, "reg", 100, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := debouncer{storeQuiet: 100 * time.Millisecond, storeMax: time.Second, regQuiet: 250 * time.Millisecond, regMax: 3 * time.Second}
			for i, s := range tt.steps {
				switch s.op {
				case "store":
					d.Store(ms(s.at))
				case "reg":
					d.Registration(ms(s.at))
				case "fire":
					d.Fire()
				}
				at, ok := d.Due()
				switch {
				case s.due < 0 && ok:
					t.Errorf("step %d (%s at %dms): due at %v, want nothing pending %s", i, s.op, s.at, at.Sub(t0), s.comment)
				case s.due >= 0 && (!ok || !at.Equal(ms(s.due))):
					t.Errorf("step %d (%s at %dms): due at %v (pending %v), want %dms %s", i, s.op, s.at, at.Sub(t0), ok, s.due, s.comment)
				}
			}
		})
	}
}

// TestRegistrationsCoalesced: 2,000 sidecars registering as fast as they can
// cost a few compiles (one per registration window), each of which lists
// every sidecar registered so far, and every one of them is offered a current
// snapshot; a watcher's snapshot changes once per compile, not once per sidecar.
func TestRegistrationsCoalesced(t *testing.T) {
	f := start(t, func(c *Config) {
		c.RegistrationDebounce, c.RegistrationMaxDelay = 50*time.Millisecond, 300*time.Millisecond
	})
	watcher, err := f.cache.Connect(&node.Node{ID: "watcher"})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	waitRev(t, watcher, 0)
	base := f.rec.count()
	const n = 2000
	start := time.Now()
	var ps []*Proxy
	for i := range n {
		p, err := f.cache.Connect(&node.Node{ID: fmt.Sprintf("sc-%04d", i), Namespace: "shop", Address: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	joined := time.Since(start)
	testkit.Wait(t, 10*time.Second, func() error {
		for _, p := range ps {
			if _, current := p.Offer(); !current {
				return fmt.Errorf("%s not offered a current snapshot", p.Node().ID)
			}
		}
		if got := len(f.rec.last().Proxies); got != n {
			return fmt.Errorf("last compile listed %d registering proxies, want %d", got, n)
		}
		return nil
	})
	compiles := f.rec.count() - base
	// One per window the joins spanned (each at most RegistrationMaxDelay),
	// plus the last; far from one per sidecar.
	if limit := int(joined/(300*time.Millisecond)) + 3; compiles > limit {
		t.Errorf("%d registrations over %v compiled %d times, want at most %d", n, joined, compiles, limit)
	}
	t.Logf("%d registrations over %v: %d compiles", n, joined.Round(time.Millisecond), compiles)
}
