// Package corrupt damages copies of a boltstore file the ways issue #11 found
// crashing or silently rewinding pilot (truncations, random meta pages, zeroed
// and random pages, a random freelist, a 0-byte file), for tests of the store
// and of the real pilot binary.
package corrupt

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Corruption damages a copy of a store file; FileMeta is what bbolt's meta pages say.
type Corruption struct {
	Name string
	Do   func(b []byte, m FileMeta) []byte
	// older: bbolt opens it at an older revision (a damaged meta page, the other
	// still valid): the store cannot tell, pilot's published-revision record does
	// (pilot/server's regression check, tested there with the real binary).
	Older bool
}

// FileMeta is what the current meta page (bbolt's layout: a 16-byte page header,
// then magic, version, page size, flags, root {pgid, sequence}, freelist pgid,
// high-water pgid, txid, checksum) says.
type FileMeta struct {
	pageSize           int
	root, freelist, hw uint64
	current            int // the meta page with the higher txid
}

// ReadMeta reads the current meta page of a bbolt file's bytes.
func ReadMeta(b []byte) (FileMeta, error) {
	if len(b) < 2*4096 {
		return FileMeta{}, fmt.Errorf("corrupt: %d bytes is not a bbolt file", len(b))
	}
	page := func(i int) (txid uint64, m FileMeta) {
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
		return m1, nil
	}
	return m0, nil
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func pageOf(b []byte, m FileMeta, id uint64) []byte {
	off := int(id) * m.pageSize
	return b[off : off+m.pageSize]
}

// MinFileBytes is the smallest file every damage of All applies to (the
// truncations cut to 8 and 128 KiB).
const MinFileBytes = 256 << 10

// All are issue #11's twelve: truncations, random meta pages, zeroed
// and random pages, a random freelist, a 0-byte file.
var All = []Corruption{
	{Name: "truncated to 8KiB", Do: func(b []byte, m FileMeta) []byte { return b[:8<<10] }},
	{Name: "truncated to 128KiB", Do: func(b []byte, m FileMeta) []byte { return b[:128<<10] }},
	{Name: "truncated by its last page", Do: func(b []byte, m FileMeta) []byte { return b[:int(m.hw-1)*m.pageSize] }},
	{Name: "0 bytes", Do: func(b []byte, m FileMeta) []byte { return nil }},
	{Name: "random current meta page", Older: true, Do: func(b []byte, m FileMeta) []byte {
		fill(pageOf(b, m, uint64(m.current)), 1)
		return b
	}},
	{Name: "both meta pages random", Do: func(b []byte, m FileMeta) []byte {
		fill(pageOf(b, m, 0), 2)
		fill(pageOf(b, m, 1), 3)
		return b
	}},
	{Name: "random root page", Do: func(b []byte, m FileMeta) []byte {
		fill(pageOf(b, m, m.root), 4)
		return b
	}},
	{Name: "zeroed root page", Do: func(b []byte, m FileMeta) []byte {
		clear(pageOf(b, m, m.root))
		return b
	}},
	{Name: "zeroed data pages", Do: func(b []byte, m FileMeta) []byte {
		for id := uint64(2); id < m.hw; id++ {
			if id != m.root && id != m.freelist && id%3 == 0 {
				clear(pageOf(b, m, id))
			}
		}
		return b
	}},
	{Name: "random data pages", Do: func(b []byte, m FileMeta) []byte {
		for id := uint64(2); id < m.hw; id++ {
			if id != m.root && id != m.freelist && id%4 == 1 {
				fill(pageOf(b, m, id), id)
			}
		}
		return b
	}},
	{Name: "random freelist", Do: func(b []byte, m FileMeta) []byte {
		p := pageOf(b, m, m.freelist)
		fill(p[16:], 5) // keep the page header: ids that claim live pages
		return b
	}},
	{Name: "random last page", Do: func(b []byte, m FileMeta) []byte {
		fill(pageOf(b, m, m.hw-1), 6)
		return b
	}},
}
