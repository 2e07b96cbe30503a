package mtls

import (
	"testing"
	"time"
)

// TestRetireAt runs the retirement point line by line: a connection made
// before the RetireFraction point retires there; one made at or after it keeps
// half the time its peer's certificate has left.
func TestRetireAt(t *testing.T) {
	nb := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	na := nb.Add(24 * time.Hour)
	at := func(h float64) time.Time { return nb.Add(time.Duration(h * float64(time.Hour))) }
	for _, tc := range []struct {
		name      string
		made      time.Time
		want      time.Time
		resumable bool // a session of this certificate at made
	}{
		{"made at NotBefore", nb, at(18), true},
		{"made mid-life", at(12), at(18), true},
		{"made one hour before the point", at(17), at(18), true},
		{"made 1ns before the point", at(18).Add(-1), at(18), true},
		{"made at the point: halfway to NotAfter", at(18), at(21), false},
		{"made after the point", at(20), at(22), false},
		{"made at NotAfter", na, na, false},
	} {
		if got := RetireAt(nb, na, tc.made); !got.Equal(tc.want) {
			t.Errorf("%s: RetireAt = %s, want %s", tc.name, got.Sub(nb), tc.want.Sub(nb))
		}
		if got := resumable(nb, na, tc.made); got != tc.resumable {
			t.Errorf("%s: resumable = %v, want %v", tc.name, got, tc.resumable)
		}
	}
	// The point lies past the latest renewal (sidecar/certclient renews at
	// 50%..60%), so a connection made after it meets the renewed certificate.
	if RetireFraction <= 0.6 || RetireFraction >= 1 {
		t.Errorf("RetireFraction %v must lie in (0.6, 1)", RetireFraction)
	}
}
