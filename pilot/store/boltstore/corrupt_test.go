package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore/corrupt"
	"github.com/weft-mesh/weft/pilot/store/storetest"
)

// TestOpenCorrupt: each damage of issue #11 (five of them crashed pilot inside
// bbolt) is an error from Open naming the file, never a panic, or (a damaged
// meta page) an older revision that pilot's record catches.
func TestOpenCorrupt(t *testing.T) {
	src := t.TempDir()
	s := openT(t, src)
	ctx := context.Background()
	var rev store.Revision
	for i := range 40 {
		var muts []store.Mutation
		for j := range 10 {
			o := storetest.Service("shop", fmt.Sprintf("svc-%03d", j*40+i), int32(1+i%60))
			o.Metadata.Labels = map[string]string{"pad": strings.Repeat("x", 60)}
			muts = append(muts, store.Mutation{Op: store.OpPut, Object: o})
		}
		res, err := s.Apply(ctx, muts)
		if err != nil {
			t.Fatal(err)
		}
		rev = res.Revision
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(src, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if len(orig) < corrupt.MinFileBytes {
		t.Fatalf("store file is %d bytes; the damages need at least %d", len(orig), corrupt.MinFileBytes)
	}
	meta, err := corrupt.ReadMeta(orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range corrupt.All {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			b := c.Do(append([]byte(nil), orig...), meta)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				got := s.rev
				if cerr := s.Close(); cerr != nil {
					t.Errorf("Close: %v", cerr)
				}
				if c.Older && got < rev {
					t.Logf("opened at revision %d of %d: older, for pilot's record to refuse", got, rev)
					return
				}
				t.Fatalf("Open of a damaged file succeeded at revision %d (was %d)", got, rev)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error does not name the file %s: %v", path, err)
			}
			if !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("error is not store.ErrCorrupt: %v", err)
			}
		})
	}
}
