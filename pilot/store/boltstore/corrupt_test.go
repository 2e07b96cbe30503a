package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
)

// corruption damages a copy of a store file; meta is what bbolt's meta pages say.
type corruption struct {
	name string
	do   func(t *testing.T, b []byte, m fileMeta) []byte
	// older: bbolt opens it at an older revision (a damaged meta page, the other
	// still valid): the store cannot tell, pilot's published-revision record does
	// (pilot/server's regression check, tested there with the real binary).
	older bool
}

// fileMeta is what the current meta page (bbolt's layout: a 16-byte page header,
// then magic, version, page size, flags, root {pgid, sequence}, freelist pgid,
// high-water pgid, txid, checksum) says.
type fileMeta struct {
	pageSize           int
	root, freelist, hw uint64
	current            int // the meta page with the higher txid
}

func readMeta(t *testing.T, b []byte) fileMeta {
	t.Helper()
	page := func(i int) (txid uint64, m fileMeta) {
		off := i * int(binary.LittleEndian.Uint32(b[16+8:]))
		if i == 0 {
			off = 0
		}
		p := b[off+16:]
		m.pageSize = int(binary.LittleEndian.Uint32(p[8:]))
		m.root = binary.LittleEndian.Uint64(p[16:])
		m.freelist = binary.LittleEndian.Uint64(p[32:])
		m.hw = binary.LittleEndian.Uint64(p[40:])
		return binary.LittleEndian.Uint64(p[48:]), m
	}
	t0, m0 := page(0)
	t1, m1 := page(1)
	if t1 > t0 {
		m1.current = 1
		return m1
	}
	return m0
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func pageOf(b []byte, m fileMeta, id uint64) []byte {
	off := int(id) * m.pageSize
	return b[off : off+m.pageSize]
}

// corruptions are issue #11's twelve: truncations, random meta pages, zeroed
// and random pages, a random freelist, a 0-byte file.
var corruptions = []corruption{
	{name: "truncated to 8KiB", do: func(t *testing.T, b []byte, m fileMeta) []byte { return b[:8<<10] }},
	{name: "truncated to 128KiB", do: func(t *testing.T, b []byte, m fileMeta) []byte { return b[:128<<10] }},
	{name: "truncated by its last page", do: func(t *testing.T, b []byte, m fileMeta) []byte { return b[:int(m.hw-1)*m.pageSize] }},
	{name: "0 bytes", do: func(t *testing.T, b []byte, m fileMeta) []byte { return nil }},
	{name: "random current meta page", older: true, do: func(t *testing.T, b []byte, m fileMeta) []byte {
		fill(pageOf(b, m, uint64(m.current)), 1)
		return b
	}},
	{name: "both meta pages random", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		fill(pageOf(b, m, 0), 2)
		fill(pageOf(b, m, 1), 3)
		return b
	}},
	{name: "random root page", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		fill(pageOf(b, m, m.root), 4)
		return b
	}},
	{name: "zeroed root page", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		clear(pageOf(b, m, m.root))
		return b
	}},
	{name: "zeroed data pages", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		for id := uint64(2); id < m.hw; id++ {
			if id != m.root && id != m.freelist && id%3 == 0 {
				clear(pageOf(b, m, id))
			}
		}
		return b
	}},
	{name: "random data pages", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		for id := uint64(2); id < m.hw; id++ {
			if id != m.root && id != m.freelist && id%4 == 1 {
				fill(pageOf(b, m, id), id)
			}
		}
		return b
	}},
	{name: "random freelist", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		p := pageOf(b, m, m.freelist)
		fill(p[16:], 5) // keep the page header: ids that claim live pages
		return b
	}},
	{name: "random last page", do: func(t *testing.T, b []byte, m fileMeta) []byte {
		fill(pageOf(b, m, m.hw-1), 6)
		return b
	}},
}

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
	if len(orig) < 256<<10 {
		t.Fatalf("store file is %d bytes; the truncations need more than 256KiB", len(orig))
	}
	meta := readMeta(t, orig)
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			b := c.do(t, append([]byte(nil), orig...), meta)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				got := s.rev
				if cerr := s.Close(); cerr != nil {
					t.Errorf("Close: %v", cerr)
				}
				if c.older && got < rev {
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
