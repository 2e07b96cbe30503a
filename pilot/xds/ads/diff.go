package ads

import (
	"sort"
	"sync"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// diffCache shares, across streams, the names that differ for one type between
// two snapshots. Proxies of one scope hold the same snapshots, so a fleet-wide
// push computes each diff once instead of once per stream. It is keyed by the
// type's set versions (a hash of every name and content hash), not by snapshot
// pointer: Weft sidecars each hold their own snapshot (their signed manifest is
// per node) over the same shared sets, and must share the diff too.
//
// Every stream of a push looks its diffs up here, so reads take no lock: the
// entries live in a sync.Map, replaced whole by a new one when max is reached.
type diffCache struct {
	max int
	cur atomic.Pointer[diffMap]
}

type diffMap struct {
	m sync.Map     // diffKey -> *diffEntry
	n atomic.Int64 // entries stored
}

type diffKey struct {
	from, to string // set versions of the type
	typ      int    // typeIndex
}

type diffEntry struct {
	once  sync.Once
	names []string // sorted names added, changed or removed
	// What a wildcard subscription is sent for the diff (diffCache.wildcard).
	wildOnce sync.Once
	adds     []*discoveryv3.Resource
	removed  []string
}

func newDiffCache(max int) *diffCache {
	c := &diffCache{max: max}
	c.cur.Store(&diffMap{})
	return c
}

// names returns the sorted names of typ whose version differs between from and
// to (present in only one counts). The result is shared: do not modify it.
func (c *diffCache) names(from, to *snapshot.Snapshot, typ string) []string {
	if e := c.entry(from, to, typ); e != nil {
		return e.names
	}
	return nil
}

// wildcard is what a wildcard subscription holding from's set of typ, with
// nothing forced, is sent to hold to's: the added or changed resources (to's
// wrappers, in name order) and the removed names. Every such stream gets the
// same, so it is computed once per diff; the slices are shared, read-only.
func (c *diffCache) wildcard(from, to *snapshot.Snapshot, typ string, wraps *wrapCache) ([]*discoveryv3.Resource, []string) {
	e := c.entry(from, to, typ)
	if e == nil {
		return nil, nil
	}
	e.wildOnce.Do(func() {
		cur := to.Resources[typ]
		var w *wrapped
		for _, n := range e.names {
			if _, ok := cur[n]; !ok {
				e.removed = append(e.removed, n)
				continue
			}
			if w == nil {
				w = wraps.get(to, typ)
			}
			e.adds = append(e.adds, w.byName[n])
		}
		if w != nil && len(e.adds) == len(w.all) {
			e.adds = w.all // everything, in the same (name) order: the one slice
		}
	})
	return e.adds, e.removed
}

// entry is the diff of typ between from and to, computed once; nil when the
// sets are the same.
func (c *diffCache) entry(from, to *snapshot.Snapshot, typ string) *diffEntry {
	k := diffKey{from.Version(typ), to.Version(typ), typeIndex(typ)}
	if k.from == k.to {
		return nil // same set: nothing differs
	}
	d := c.cur.Load()
	v, ok := d.m.Load(k)
	if !ok {
		if d.n.Load() >= int64(c.max) {
			// Drop everything: entries pin old snapshots, and the working set
			// of one push is rebuilt immediately.
			c.cur.CompareAndSwap(d, &diffMap{})
			d = c.cur.Load()
		}
		var loaded bool
		if v, loaded = d.m.LoadOrStore(k, &diffEntry{}); !loaded {
			d.n.Add(1)
		}
	}
	e := v.(*diffEntry)
	e.once.Do(func() { e.names = diffNames(from, to, typ) })
	return e
}

func diffNames(from, to *snapshot.Snapshot, typ string) []string {
	a, b := from.Resources[typ], to.Resources[typ]
	var out []string
	for n, r := range b {
		if old, ok := a[n]; !ok || old.Version != r.Version {
			out = append(out, n)
		}
	}
	for n := range a {
		if _, ok := b[n]; !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func sortStrings(s []string) { sort.Strings(s) }

// wrapCache shares, across delta streams, the discovery Resource wrappers of one
// type's set (keyed by set version, like diffCache): built once, read-only afterwards (gRPC only reads them while
// marshalling), so a fleet-wide full sync does not allocate them per proxy.
type wrapCache struct {
	max int
	cur atomic.Pointer[wrapMap] // read without a lock, as diffCache
}

type wrapMap struct {
	m sync.Map // wrapKey -> *wrapped
	n atomic.Int64
}

type wrapKey struct {
	version string // set version of typ: equal sets share wrappers whatever snapshot holds them
	typ     int    // typeIndex
}

type wrapped struct {
	once   sync.Once
	all    []*discoveryv3.Resource // every resource, sorted by name
	names  []string                // their names, in the same order
	byName map[string]*discoveryv3.Resource
}

func newWrapCache(max int) *wrapCache {
	c := &wrapCache{max: max}
	c.cur.Store(&wrapMap{})
	return c
}

func (c *wrapCache) get(s *snapshot.Snapshot, typ string) *wrapped {
	k := wrapKey{s.Version(typ), typeIndex(typ)}
	d := c.cur.Load()
	v, ok := d.m.Load(k)
	if !ok {
		if d.n.Load() >= int64(c.max) {
			c.cur.CompareAndSwap(d, &wrapMap{}) // as in diffCache: entries pin snapshots
			d = c.cur.Load()
		}
		var loaded bool
		if v, loaded = d.m.LoadOrStore(k, &wrapped{}); !loaded {
			d.n.Add(1)
		}
	}
	w := v.(*wrapped)
	w.once.Do(func() {
		names := s.Names(typ)
		w.names = names
		w.all = make([]*discoveryv3.Resource, len(names))
		w.byName = make(map[string]*discoveryv3.Resource, len(names))
		for i, n := range names {
			r := s.Resources[typ][n]
			w.all[i] = &discoveryv3.Resource{Name: n, Version: r.Version, Resource: r.Any}
			w.byName[n] = w.all[i]
		}
	})
	return w
}
