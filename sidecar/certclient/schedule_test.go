package certclient

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/svid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func cert(nb time.Time, life time.Duration) *svid.SVID {
	return &svid.SVID{NotBefore: nb, NotAfter: nb.Add(life)}
}

func TestRenewAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		life time.Duration
		u    float64
		want time.Duration // after NotBefore
	}{
		{"24h no jitter: half", 24 * time.Hour, 0, 12 * time.Hour},
		{"24h mid jitter", 24 * time.Hour, 0.5, 13*time.Hour + 12*time.Minute},
		{"24h u just under 1: under 60%", 24 * time.Hour, 0.999999, 14*time.Hour + 24*time.Minute - 8640*time.Microsecond},
		{"u=1 clamped below 60%", 10 * time.Second, 1, 6*time.Second - 1},
		{"u<0 clamped to half", 10 * time.Second, -3, 5 * time.Second},
		{"10s mid", 10 * time.Second, 0.5, 5500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RenewAt(cert(t0, tc.life), t0, tc.u).Sub(t0)
			if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("RenewAt = NotBefore+%v, want +%v", got, tc.want)
			}
		})
	}
}

// The CA backdates NotBefore a minute; a skewed clock may receive a
// certificate before its NotBefore or after its NotAfter.
func TestRenewAtReceived(t *testing.T) {
	c := cert(t0.Add(-time.Minute), time.Minute+10*time.Second) // issued at t0 for 10s, backdated 1m
	for _, tc := range []struct {
		name     string
		received time.Time
		u        float64
		want     time.Time
		usable   time.Duration
	}{
		{"backdated: from arrival", t0, 0, t0.Add(5 * time.Second), 10 * time.Second},
		{"backdated, jitter", t0, 0.5, t0.Add(5500 * time.Millisecond), 10 * time.Second},
		{"arrival 2s late", t0.Add(2 * time.Second), 0, t0.Add(6 * time.Second), 8 * time.Second},
		{"local clock before NotBefore: from NotBefore", t0.Add(-2 * time.Minute), 0, t0.Add(-25 * time.Second), 70 * time.Second},
		{"received after NotAfter: now-ish", t0.Add(time.Minute), 0, t0.Add(10 * time.Second), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RenewAt(c, tc.received, tc.u); !got.Equal(tc.want) {
				t.Errorf("RenewAt = t0%+v, want t0%+v", got.Sub(t0), tc.want.Sub(t0))
			}
			if got := Usable(c, tc.received); got != tc.usable {
				t.Errorf("Usable = %v, want %v", got, tc.usable)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		life     time.Duration
		u        float64
		want     time.Duration
	}{
		{"first failure, no cert, low draw", 1, 0, 0, 500 * time.Millisecond},
		{"first failure, high draw", 1, 0, 0.999999999, time.Second - 1},
		{"second doubles", 2, 0, 0, time.Second},
		{"third", 3, 0, 0, 2 * time.Second},
		{"no cert caps at MaxBackoff", 30, 0, 0, MaxBackoff / 2},
		{"no cert at cap, high draw", 30, 0, 0.5, MaxBackoff * 3 / 4},
		{"24h cert caps at MaxBackoff", 30, 24 * time.Hour, 0, MaxBackoff / 2},
		{"10m cert: cap a tenth = 60s = MaxBackoff", 30, 10 * time.Minute, 0, 30 * time.Second},
		{"5m cert: cap 30s", 30, 5 * time.Minute, 0, 15 * time.Second},
		{"10s cert: cap 1s", 30, 10 * time.Second, 0, 500 * time.Millisecond},
		{"3s cert: cap floored at InitialBackoff", 30, 3 * time.Second, 0, 500 * time.Millisecond},
		{"huge failure count does not overflow", 1 << 30, 0, 0, MaxBackoff / 2},
		{"zero failures treated as first", 0, 0, 0, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryDelay(tc.failures, tc.life, tc.u); got != tc.want {
				t.Fatalf("RetryDelay(%d, %v, %v) = %v, want %v", tc.failures, tc.life, tc.u, got, tc.want)
			}
		})
	}
}

func TestRetryCap(t *testing.T) {
	for _, tc := range []struct {
		life, want time.Duration
	}{
		{0, MaxBackoff},
		{-time.Second, MaxBackoff},
		{9 * time.Second, InitialBackoff}, // a tenth is below the floor
		{10 * time.Second, InitialBackoff},
		{11 * time.Second, 1100 * time.Millisecond},
		{10 * time.Minute, MaxBackoff},                // at the bound
		{10*time.Minute + 10*time.Second, MaxBackoff}, // one past
		{24 * time.Hour, MaxBackoff},
	} {
		if got := RetryCap(tc.life); got != tc.want {
			t.Errorf("RetryCap(%v) = %v, want %v", tc.life, got, tc.want)
		}
	}
}

func TestCredentialFor(t *testing.T) {
	c := cert(t0, 10*time.Second)
	for _, tc := range []struct {
		name   string
		s      *svid.SVID
		now    time.Time
		margin time.Duration
		want   Credential
	}{
		{"no certificate", nil, t0, 0, Token},
		{"valid", c, t0.Add(5 * time.Second), time.Second, Certificate},
		{"valid to exactly the margin", c, t0.Add(9 * time.Second), time.Second, Certificate},
		{"lapses within the margin", c, t0.Add(9*time.Second + 1), time.Second, Token},
		{"expired", c, t0.Add(11 * time.Second), 0, Token},
		{"not yet valid", c, t0.Add(-time.Second), 0, Token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CredentialFor(tc.s, tc.now, tc.margin); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNextAttempt(t *testing.T) {
	c := cert(t0, 10*time.Second)
	for _, tc := range []struct {
		name     string
		s        *svid.SVID
		failures int
		life     time.Duration
		now      time.Time
		u        float64
		want     time.Time
	}{
		{"first CSR at once", nil, 0, 0, t0, 0.5, t0},
		{"fresh certificate: its renewal time", c, 0, 10 * time.Second, t0.Add(time.Second), 0, t0.Add(5 * time.Second)},
		{"with jitter", c, 0, 10 * time.Second, t0.Add(time.Second), 0.5, t0.Add(5500 * time.Millisecond)},
		{"renewal time passed: now", c, 0, 10 * time.Second, t0.Add(8 * time.Second), 0, t0.Add(8 * time.Second)},
		{"first CSR failed: backoff from now", nil, 1, 0, t0, 0, t0.Add(500 * time.Millisecond)},
		{"renewal failed 3 times, 10s cert: capped at 1s", c, 3, 10 * time.Second, t0.Add(7 * time.Second), 0, t0.Add(7*time.Second + 500*time.Millisecond)},
		{"expired cert, failures go on at the cap", c, 50, 10 * time.Second, t0.Add(time.Hour), 0.999999999, t0.Add(time.Hour + time.Second - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextAttempt(tc.s, t0, tc.failures, tc.life, tc.now, tc.u); !got.Equal(tc.want) {
				t.Fatalf("got %v, want %v", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}
