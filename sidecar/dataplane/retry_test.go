package dataplane

import (
	"testing"
	"time"
)

// Full jitter: the wait before retry n is rnd mod min(max, base×2^n), so it lies in
// [0, that bound) and reaches bound-1 for the largest draw.
func TestBackoffBounds(t *testing.T) {
	const ms = time.Millisecond
	top := ^uint64(0)
	for _, tc := range []struct {
		name      string
		base, max time.Duration
		n         int
		rnd       uint64
		want      time.Duration
	}{
		{"first retry, smallest draw", 25 * ms, 250 * ms, 0, 0, 0},
		{"first retry below base", 25 * ms, 250 * ms, 0, uint64(25*ms) - 1, 25*ms - 1},
		{"first retry wraps at base", 25 * ms, 250 * ms, 0, uint64(25 * ms), 0},
		{"second retry below 2×base", 25 * ms, 250 * ms, 1, uint64(50*ms) - 1, 50*ms - 1},
		{"second retry wraps at 2×base", 25 * ms, 250 * ms, 1, uint64(50 * ms), 0},
		{"fourth retry below 8×base", 25 * ms, 250 * ms, 3, uint64(200*ms) - 1, 200*ms - 1},
		{"fifth retry capped by max", 25 * ms, 250 * ms, 4, uint64(250*ms) - 1, 250*ms - 1},
		{"fifth retry wraps at max", 25 * ms, 250 * ms, 4, uint64(250 * ms), 0},
		{"huge n capped by max", 25 * ms, 250 * ms, 1000, uint64(250*ms) + 7, 7},
		{"n 63 no overflow", time.Nanosecond, time.Hour, 63, uint64(time.Hour) + 1, 1},
		{"max equals base", 10 * ms, 10 * ms, 5, uint64(10*ms) + 3, 3},
		{"largest draw", 25 * ms, 250 * ms, 2, top, time.Duration(top % uint64(100*ms))},
		{"no base", 0, 250 * ms, 2, top, 0},
		{"no max", 25 * ms, 0, 2, top, 0},
	} {
		if got := Backoff(tc.base, tc.max, tc.n, tc.rnd); got != tc.want {
			t.Errorf("%s: Backoff(%v, %v, %d, %d) = %v, want %v", tc.name, tc.base, tc.max, tc.n, tc.rnd, got, tc.want)
		}
	}
	// Every draw of every retry stays inside [0, min(max, base×2^n)).
	for n := range 8 {
		bound := min(250*ms, 25*ms<<n)
		for _, rnd := range []uint64{0, 1, uint64(bound) - 1, uint64(bound), top, top - 1, 0x9e3779b97f4a7c15} {
			if d := Backoff(25*ms, 250*ms, n, rnd); d < 0 || d >= bound {
				t.Errorf("retry %d, draw %d: %v outside [0, %v)", n, rnd, d, bound)
			}
		}
	}
}

func TestRetryConditions(t *testing.T) {
	on := func(names ...string) *Retry {
		r := &Retry{}
		for _, n := range names {
			b, ok := retryBits[n]
			if !ok {
				t.Fatalf("unknown %q", n)
			}
			r.On |= b
		}
		return r
	}
	for _, tc := range []struct {
		on                              []string
		status                          int
		wantStatus, connect, reset, tmo bool
	}{
		{[]string{"5xx"}, 500, true, true, true, true},
		{[]string{"5xx"}, 501, true, true, true, true},
		{[]string{"5xx"}, 409, false, true, true, true},
		{[]string{"gateway-error"}, 500, false, true, true, true},
		{[]string{"gateway-error"}, 502, true, true, true, true},
		{[]string{"gateway-error"}, 503, true, true, true, true},
		{[]string{"gateway-error"}, 504, true, true, true, true},
		{[]string{"reset"}, 503, false, true, true, false},
		{[]string{"connect-failure"}, 503, false, true, false, false},
		{[]string{"retriable-4xx"}, 409, true, false, false, false},
		{[]string{"retriable-4xx"}, 408, false, false, false, false},
		{[]string{"unavailable"}, 503, false, false, false, false},
	} {
		r := on(tc.on...)
		if got := r.RetryStatus(tc.status); got != tc.wantStatus {
			t.Errorf("%v: RetryStatus(%d) = %v", tc.on, tc.status, got)
		}
		if got := r.RetryConnect(false); got != tc.connect {
			t.Errorf("%v: RetryConnect(false) = %v", tc.on, got)
		}
		if got := r.RetryConnect(true); got != tc.reset {
			t.Errorf("%v: RetryConnect(true) = %v", tc.on, got)
		}
		if got, want := r.RetryRefused(), tc.on[0] == "5xx"; got != want {
			t.Errorf("%v: RetryRefused() = %v", tc.on, got)
		}
		if got := r.RetryTimeout(); got != tc.tmo {
			t.Errorf("%v: RetryTimeout() = %v", tc.on, got)
		}
	}
	if !on("refused-stream").RetryRefused() || on("refused-stream").RetryConnect(false) {
		t.Error("refused-stream: retries refused streams only")
	}
	for _, tc := range []struct {
		name   string
		status int
	}{{"cancelled", GRPCCancelled}, {"deadline-exceeded", GRPCDeadlineExceeded}, {"resource-exhausted", GRPCResourceExhausted},
		{"unavailable", GRPCUnavailable}, {"internal", GRPCInternal}} {
		r := on(tc.name)
		for s := range 17 {
			if got, want := r.RetryGRPC(s), s == tc.status; got != want {
				t.Errorf("%s: RetryGRPC(%d) = %v, want %v", tc.name, s, got, want)
			}
		}
		if r.RetryStatus(503) || r.RetryConnect(true) || r.RetryConnect(false) {
			t.Errorf("%s retries HTTP failures", tc.name)
		}
	}
}
