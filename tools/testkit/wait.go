// Package testkit holds the helpers tests across the repository share. It is imported
// only by tests and by test-only helper packages.
//
// It is the one wait-on-condition helper: tests wait on a condition with a deadline,
// never on a sleep, and never with a private copy of this loop.
package testkit

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often Poll, Wait and Eventually re-check their condition.
const PollInterval = 5 * time.Millisecond

// errNotYet is the last error Eventually's condition reports while it does not hold.
var errNotYet = errors.New("condition not met")

// Poll calls cond every PollInterval until it returns nil or d passes. On the deadline
// it returns an error naming d and wrapping cond's last error, so the caller sees the
// state it last observed. It is for code that returns errors instead of failing a test
// (process-startup helpers, for example).
func Poll(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		time.Sleep(PollInterval)
	}
}

// Wait polls cond as Poll does and fails the test with cond's last error at the
// deadline, so the failure shows the state the test saw.
func Wait(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(d, cond); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it holds or d passes; then the test fails naming what it
// waited for.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Poll(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
