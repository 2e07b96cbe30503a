package ads

import (
	"sort"
	"sync"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// diffCache shares, across streams, the names that differ for one type between
// two snapshots. Proxies of one scope hold the same snapshots, so a fleet-wide
// push computes each diff once instead of once per stream.
type diffCache struct {
	max int

	mu sync.Mutex // guards m
	m  map[diffKey]*diffEntry
}

type diffKey struct {
	from, to *snapshot.Snapshot
	typ      string
}

type diffEntry struct {
	once  sync.Once
	names []string // sorted names added, changed or removed
}

func newDiffCache(max int) *diffCache { return &diffCache{max: max, m: map[diffKey]*diffEntry{}} }

// names returns the sorted names of typ whose version differs between from and
// to (present in only one counts). The result is shared: do not modify it.
func (c *diffCache) names(from, to *snapshot.Snapshot, typ string) []string {
	k := diffKey{from, to, typ}
	c.mu.Lock()
	e, ok := c.m[k]
	if !ok {
		if len(c.m) >= c.max {
			// Drop everything: entries pin old snapshots, and the working set of
			// one push is rebuilt immediately.
			c.m = map[diffKey]*diffEntry{}
		}
		e = &diffEntry{}
		c.m[k] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.names = diffNames(from, to, typ) })
	return e.names
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
