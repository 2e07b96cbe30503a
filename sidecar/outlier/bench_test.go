package outlier

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkObserve is the request path's outcome recording: one call per upstream
// attempt (make bench: "outcome recording").
func BenchmarkObserve(b *testing.B) {
	for _, split := range []bool{false, true} {
		name := "split-off"
		if split {
			name = "split-on"
		}
		b.Run(name, func(b *testing.B) {
			c := base()
			c.SplitExternalLocalOriginErrors = split
			d := New("svc", nil)
			if err := d.Configure(c); err != nil {
				b.Fatal(err)
			}
			h := &Host{Addr: "10.0.0.1:80"}
			d.Add(h)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if t := d.Observe(h, 200); t != 0 {
						d.Trip(h, t, t0, always)
					}
				}
			})
		})
	}
}

// TestConcurrentObserveTickTrip: request goroutines, trips and ticks at once (run
// with -race); the cap holds throughout.
func TestConcurrentObserveTickTrip(t *testing.T) {
	c := base()
	c.MaxEjectionPercent = 25
	c.Interval, c.BaseEjectionTime, c.MaxEjectionTime = time.Millisecond, time.Millisecond, 4*time.Millisecond
	c.FailurePercentage = &FailurePercentage{Threshold: 50, MinimumHosts: 1, RequestVolume: 1, Enforcing: 100}
	d, hs := newDet(t, c, 8)
	var wg sync.WaitGroup
	var clock atomic.Int64 // the ticker's now, for the trips
	clock.Store(t0.UnixNano())
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := hs[(g+i)%len(hs)]
				o := Outcome(200)
				if i%7 != 0 {
					o = 503
				}
				if tr := d.Observe(h, o); tr != 0 {
					d.Trip(h, tr, time.Unix(0, clock.Load()), always)
				}
			}
		})
	}
	now := t0
	happened := func() bool {
		s := d.Stats()
		return s.ByKind[KindConsecutive5xx].Ejected > 0 && s.ByKind[KindFailurePercentage].Ejected > 0 && s.Returns > 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 2000 || !happened(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("nothing happened: %+v", d.Stats())
		}
		now = now.Add(100 * time.Microsecond)
		clock.Store(now.UnixNano())
		d.Tick(now, always, nil)
		if n, m := d.Ejected(); n > c.MaxEjected(m) {
			t.Fatalf("%d of %d ejected, cap %d", n, m, c.MaxEjected(m))
		}
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
}
