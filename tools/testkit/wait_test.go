package testkit

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPollReturnsOnceCondHolds(t *testing.T) {
	var n atomic.Int32
	err := Poll(time.Second, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Poll = %v, want nil", err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3", got)
	}
}

func TestPollAtDeadlineWrapsLastError(t *testing.T) {
	errState := errors.New("state")
	var n atomic.Int32
	start := time.Now()
	err := Poll(20*time.Millisecond, func() error {
		return fmt.Errorf("seen %d: %w", n.Add(1), errState)
	})
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its 20ms deadline", elapsed)
	}
	if !errors.Is(err, errState) {
		t.Fatalf("Poll = %v, want it wrapping cond's error", err)
	}
	// The last error, not the first: the state at the deadline is what the caller needs.
	if want := fmt.Sprintf("seen %d", n.Load()); !strings.Contains(err.Error(), want) {
		t.Fatalf("Poll = %q, want the last error %q", err, want)
	}
	if !strings.Contains(err.Error(), "20ms") {
		t.Fatalf("Poll = %q, want it naming the deadline 20ms", err)
	}
}

func TestPollChecksOnceEvenWithZeroDeadline(t *testing.T) {
	if err := Poll(0, func() error { return nil }); err != nil {
		t.Fatalf("Poll(0) on a holding condition = %v, want nil", err)
	}
}

func TestWaitFailsWithLastError(t *testing.T) {
	ft := runFake(func(ft *fakeT) {
		Wait(ft, 20*time.Millisecond, func() error { return errors.New("status {Ready:false}") })
	})
	if !ft.failed || !strings.Contains(ft.msg, "status {Ready:false}") {
		t.Fatalf("Wait failed=%v msg=%q, want a failure showing cond's error", ft.failed, ft.msg)
	}
}

func TestWaitReturnsOnceCondHolds(t *testing.T) {
	var n atomic.Int32
	Wait(t, time.Second, func() error {
		if n.Add(1) < 2 {
			return errors.New("not yet")
		}
		return nil
	})
}

func TestEventuallyWaitsForCondition(t *testing.T) {
	var n atomic.Int32
	Eventually(t, time.Second, "third poll", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3", got)
	}
}

func TestEventuallyFailsAtDeadline(t *testing.T) {
	ft := runFake(func(ft *fakeT) {
		Eventually(ft, 20*time.Millisecond, "never", func() bool { return false })
	})
	if !ft.failed || !strings.Contains(ft.msg, "never") || !strings.Contains(ft.msg, "20ms") {
		t.Fatalf("Eventually failed=%v msg=%q, want a failure naming what and the deadline", ft.failed, ft.msg)
	}
}

// runFake runs f with a fakeT on its own goroutine, as Fatal ends it with Goexit.
func runFake(f func(*fakeT)) *fakeT {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ft)
	}()
	<-done
	return ft
}

// fakeT records Fatal and Fatalf and ends the goroutine as testing.T does.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatal(args ...any) {
	f.failed, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
