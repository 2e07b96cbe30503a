// Package testkit holds the helpers tests across the repository share. It is imported
// only by tests.
package testkit

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually re-checks its condition.
const PollInterval = 5 * time.Millisecond

// Eventually polls cond every PollInterval until it holds or d passes; then the test
// fails naming what it waited for. It is the one wait-on-condition helper: tests wait
// on a condition with a deadline, never on a sleep.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(PollInterval)
	}
}
