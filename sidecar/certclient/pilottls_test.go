package certclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/certs/bundle"
)

func TestRootFile(t *testing.T) {
	a, b := newCA(t), newCA(t)
	f := filepath.Join(t.TempDir(), "root.pem")
	write := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadRootFile(f); err == nil || !strings.Contains(err.Error(), "ca-root "+f) {
		t.Fatalf("missing file: %v", err)
	}
	write([]byte("junk"))
	if _, err := LoadRootFile(f); err == nil || !strings.Contains(err.Error(), "ca-root "+f) {
		t.Fatalf("junk: %v", err)
	}
	// At the size bound (PEM padded with a trailing newline run) and one past.
	pad := func(n int) []byte {
		p := append([]byte(nil), a.Bundle().PEM()...)
		return append(p, []byte(strings.Repeat("\n", n-len(p)))...)
	}
	write(pad(MaxRootFileBytes))
	r, err := LoadRootFile(f)
	if err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	write(pad(MaxRootFileBytes + 1))
	if _, err := LoadRootFile(f); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("one past the bound: %v", err)
	}
	// The loaded one keeps its last good roots through a bad file...
	got, err := r.Load()
	if err != nil || !got.Equal(a.Bundle()) {
		t.Fatalf("last good kept: %v", err)
	}
	// ...and follows a good change (pilot rewrites root.pem on rotation).
	ab, err := a.Bundle().Union(b.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	write(ab.PEM())
	if got, err := r.Load(); err != nil || !got.Equal(ab) {
		t.Fatalf("after the file changed: %v", err)
	}
	// Union adds the delivered bundle; nil delivered is the file alone.
	write(a.Bundle().PEM())
	u, err := r.Union(func() *bundle.Bundle { return b.Bundle() })()
	if err != nil || !u.Equal(ab) {
		t.Fatalf("union: %v", err)
	}
	if u, err := r.Union(func() *bundle.Bundle { return nil })(); err != nil || !u.Equal(a.Bundle()) {
		t.Fatalf("union with nothing delivered: %v", err)
	}
	if u, err := r.Union(nil)(); err != nil || !u.Equal(a.Bundle()) {
		t.Fatalf("no delivered source: %v", err)
	}
}
