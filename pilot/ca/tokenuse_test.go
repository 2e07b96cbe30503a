package ca

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestTokenUses(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	exp := t0.Add(time.Hour)
	u := newTokenUses(3)
	for i := range 3 { // at the bound
		if err := u.take("a", exp, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("CSR %d: %v", i+1, err)
		}
	}
	// One past it, in the same window.
	if err := u.take("a", exp, t0.Add(59*time.Second)); err == nil || !strings.Contains(err.Error(), "made 3 CSRs") {
		t.Fatalf("4th CSR in the window: %v, want refused", err)
	}
	// Another token has its own count.
	if err := u.take("b", exp, t0.Add(59*time.Second)); err != nil {
		t.Fatalf("another token: %v", err)
	}
	// A new window starts afresh.
	if err := u.take("a", exp, t0.Add(time.Minute)); err != nil {
		t.Fatalf("next window: %v", err)
	}

	// Tracked tokens: at the bound a new token is refused while all are
	// unexpired, and admitted once one has expired.
	u = newTokenUses(1)
	u.max = 3
	for i := range 3 {
		if err := u.take(fmt.Sprint(i), t0.Add(time.Duration(i+1)*time.Minute), t0); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if err := u.take("new", exp, t0); err == nil || !strings.Contains(err.Error(), "3 bootstrap tokens in use") {
		t.Fatalf("token past the tracked bound: %v, want refused", err)
	}
	if err := u.take("new", exp, t0.Add(time.Minute)); err != nil {
		t.Fatalf("after token 0 expired: %v", err)
	}
	if len(u.m) != 3 {
		t.Fatalf("tracked %d tokens, want 3 (the expired one dropped)", len(u.m))
	}
}
