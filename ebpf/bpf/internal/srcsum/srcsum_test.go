package srcsum

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCommand(t *testing.T) {
	line := GeneratePrefix + "-target bpfel X x.c -- -O2"
	for _, tc := range []struct {
		name, gen, want, err string
	}{
		{"one", "package bpf\n\n" + line + "\n//go:generate go run ./x\n", line, ""},
		{"indented", "\t" + line + "\n", line, ""},
		{"none", "package bpf\n", "", "has no //go:generate go tool bpf2go line"},
		{"two", line + "\n" + line + "\n", "", "has 2 bpf2go lines, want 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Command([]byte(tc.gen))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Command = %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Command = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestSourceCoversBoth: changing the C source or the command changes the digest.
func TestSourceCoversBoth(t *testing.T) {
	gen := []byte(GeneratePrefix + "-target bpfel X x.c -- -O2\n")
	base, err := Source(gen, []byte("int x;"))
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := Source(gen, []byte("int y;"))
	g2, _ := Source([]byte(GeneratePrefix+"-target bpfel X x.c -- -O1\n"), []byte("int x;"))
	if base == c2 || base == g2 || c2 == g2 {
		t.Fatalf("digests collide: %s %s %s", base, c2, g2)
	}
	again, _ := Source(gen, []byte("int x;"))
	if again != base {
		t.Fatalf("digest not stable: %s then %s", base, again)
	}
}
