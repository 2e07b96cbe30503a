package xdsclient

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRoundOrder: every round tries each server once, in the configured order
// rotated to a random start; over many sidecars the first choice spreads
// evenly (issue #11: a fleet spreads over pilot replicas).
func TestRoundOrder(t *testing.T) {
	servers := []string{"a:1", "b:1", "c:1"}
	if got := roundOrder(servers, true, rand.IntN); !slices.Equal(got, servers) {
		t.Fatalf("ordered: %v", got)
	}
	if got := roundOrder(servers[:1], false, rand.IntN); !slices.Equal(got, servers[:1]) {
		t.Fatalf("one server: %v", got)
	}
	if got := roundOrder(servers, false, func(int) int { return 2 }); !slices.Equal(got, []string{"c:1", "a:1", "b:1"}) {
		t.Fatalf("rotated to c: %v", got)
	}
	first := map[string]int{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		got := roundOrder(servers, false, r.IntN)
		if s := slices.Sorted(slices.Values(got)); !slices.Equal(s, servers) {
			t.Fatalf("a round must try every server once: %v", got)
		}
		first[got[0]]++
	}
	for _, s := range servers {
		if n := first[s]; n < 900 || n > 1100 {
			t.Fatalf("first choices %v: not spread", first)
		}
	}
	if servers[0] != "a:1" {
		t.Fatal("roundOrder changed its argument")
	}
}
