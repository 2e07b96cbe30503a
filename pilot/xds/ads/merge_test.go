package ads

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeSorted(t *testing.T) {
	shared := []string{"a", "c"}
	tests := []struct {
		name  string
		lists [][]string
		want  []string
	}{
		{"none", nil, nil},
		{"all empty", [][]string{nil, {}}, nil},
		{"one list", [][]string{nil, shared, nil}, shared},
		{"two with overlap", [][]string{{"a", "c", "e"}, {"b", "c", "f"}}, []string{"a", "b", "c", "e", "f"}},
		{"three", [][]string{{"z"}, {"a"}, {"m", "z"}}, []string{"a", "m", "z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeSorted(tc.lists...)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
	if got := mergeSorted(nil, shared); &got[0] != &shared[0] {
		t.Fatal("a single list is copied; it should be returned as is")
	}
}
