package testkit

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEventuallyWaitsForCondition(t *testing.T) {
	var n atomic.Int32
	Eventually(t, time.Second, "third poll", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3", got)
	}
}

func TestEventuallyFailsAtDeadline(t *testing.T) {
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(ft, 20*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !ft.failed {
		t.Fatal("Eventually returned without failing on a condition that never held")
	}
}

// fakeT records Fatalf and ends the goroutine as testing.T does.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}
