package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
)

// picker chooses an endpoint. With skip it never returns an ejected host (nil when
// it finds none); without it, it ignores ejection (none, or panic mode) at no cost.
type picker interface {
	pick(hash uint64, skip bool) *Endpoint
}

// maxRedraws bounds the random draws (random, least request) that may land on
// ejected hosts before a scan from the last draw finds a usable one. Ejecting more
// than half the hosts puts a cluster in panic at the default threshold, so eight
// misses in a row are rare (under 0.4%).
const maxRedraws = 8

func defaultRand() uint64 { return rand.Uint64() }

type emptyPicker struct{}

func (emptyPicker) pick(uint64, bool) *Endpoint { return nil }

// ringPointsPerWeight is the ring points per unit of endpoint weight.
const ringPointsPerWeight = 256

// maxSchedule bounds the precomputed weighted round-robin schedule.
const maxSchedule = 4096

// roundRobin walks a precomputed weighted schedule with one atomic add per pick, so
// the hot path never takes a lock.
type roundRobin struct {
	sched []*Endpoint
	next  atomic.Uint64
}

func newRoundRobin(eps []*Endpoint) *roundRobin {
	// Reduce weights by their gcd, then scale down if the schedule would be too long.
	g := uint64(0)
	var sum uint64
	for _, e := range eps {
		g = gcd(g, uint64(e.Weight))
		sum += uint64(e.Weight)
	}
	sum /= g
	scale := 1.0
	if sum > maxSchedule {
		scale = float64(maxSchedule) / float64(sum)
	}
	w := make([]int64, len(eps))
	var total int64
	for i, e := range eps {
		w[i] = max(int64(float64(uint64(e.Weight)/g)*scale), 1)
		total += w[i]
	}
	// Smooth weighted round robin (nginx) to interleave rather than burst.
	cur := make([]int64, len(eps))
	sched := make([]*Endpoint, 0, total)
	for range total {
		best := 0
		for i := range eps {
			cur[i] += w[i]
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		sched = append(sched, eps[best])
	}
	return &roundRobin{sched: sched}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// pick takes the next schedule slot; an ejected host's slot is passed to whoever
// takes the next one (another atomic add), so the others keep their proportions.
func (r *roundRobin) pick(_ uint64, skip bool) *Endpoint {
	l := uint64(len(r.sched))
	for range l {
		e := r.sched[(r.next.Add(1)-1)%l]
		if !skip || !ejected(e) {
			return e
		}
	}
	return nil
}

// leastRequest is power of two choices on in-flight requests, weight-blind as Envoy's
// is when all weights are equal.
type leastRequest struct {
	eps []*Endpoint
	rnd func() uint64
}

func (l *leastRequest) pick(_ uint64, skip bool) *Endpoint {
	n := uint64(len(l.eps))
	if n == 1 {
		if skip && ejected(l.eps[0]) {
			return nil
		}
		return l.eps[0]
	}
	a, b := l.draw(skip), l.draw(skip)
	if a == nil || b == nil {
		return nil
	}
	if b.Active() < a.Active() {
		return b
	}
	return a
}

// draw is one uniform choice among the usable endpoints: redraws, then a scan.
func (l *leastRequest) draw(skip bool) *Endpoint {
	n := uint64(len(l.eps))
	i := l.rnd() % n
	if !skip {
		return l.eps[i]
	}
	for range maxRedraws {
		if e := l.eps[i]; !ejected(e) {
			return e
		}
		i = l.rnd() % n
	}
	return scan(l.eps, int(i))
}

// scan returns the first endpoint of eps from i on (wrapping) that is not ejected.
func scan(eps []*Endpoint, i int) *Endpoint {
	for k := range len(eps) {
		if e := eps[(i+k)%len(eps)]; !ejected(e) {
			return e
		}
	}
	return nil
}

// random picks by weight with a binary search over cumulative weights.
type random struct {
	eps   []*Endpoint
	cum   []uint64
	total uint64
	rnd   func() uint64
}

func newRandom(eps []*Endpoint, rnd func() uint64) *random {
	r := &random{eps: eps, cum: make([]uint64, len(eps)), rnd: rnd}
	for i, e := range eps {
		r.total += uint64(e.Weight)
		r.cum[i] = r.total
	}
	return r
}

// pick draws by weight; a draw of an ejected host is redrawn, so the others keep
// their weights exactly (rejection sampling), then scanned past if unlucky.
func (r *random) pick(_ uint64, skip bool) *Endpoint {
	var i int
	for range maxRedraws {
		x := r.rnd() % r.total
		i = sort.Search(len(r.cum), func(i int) bool { return r.cum[i] > x })
		if e := r.eps[i]; !skip || !ejected(e) {
			return e
		}
	}
	return scan(r.eps, i)
}

// ring is a consistent-hash ring (ketama style): each endpoint owns points
// proportional to its weight; a request goes to the first point at or after its hash.
type ring struct {
	hashes []uint64
	owners []*Endpoint
}

func newRing(eps []*Endpoint, minSize, maxSize uint64) (*ring, error) {
	var total uint64
	for _, e := range eps {
		total += uint64(e.Weight)
	}
	// A fixed number of points per unit of weight keeps a host's points the same when
	// other hosts come and go, so only the keys of a removed host move. The minimum and
	// maximum ring sizes only bend this for tiny or huge clusters.
	perUnit := uint64(ringPointsPerWeight)
	if total*perUnit < minSize {
		perUnit = (minSize + total - 1) / total
	}
	if total*perUnit > maxSize {
		perUnit = max(maxSize/total, 1)
	}
	size := total * perUnit
	if size == 0 {
		return nil, fmt.Errorf("ring size 0")
	}
	type pt struct {
		h uint64
		e *Endpoint
	}
	pts := make([]pt, 0, size+uint64(len(eps)))
	for _, e := range eps {
		n := uint64(e.Weight) * perUnit
		key := []byte(e.Address() + "_")
		base := len(key)
		for i := range n {
			key = strconv.AppendUint(key[:base], i, 10)
			pts = append(pts, pt{h: Hash(key), e: e})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return 0
	})
	r := &ring{hashes: make([]uint64, len(pts)), owners: make([]*Endpoint, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.owners[i] = p.h, p.e
	}
	return r, nil
}

// pick takes the first point at or after h whose owner is not ejected: only the
// keys of an ejected host move, each to the next host on the ring, and they come
// back when it returns.
func (r *ring) pick(h uint64, skip bool) *Endpoint {
	i := sort.Search(len(r.hashes), func(i int) bool { return r.hashes[i] >= h })
	if i == len(r.hashes) {
		i = 0
	}
	if !skip {
		return r.owners[i]
	}
	return scan(r.owners, i)
}

// Hash is the request hash ring hash uses: FNV-1a followed by a splitmix64 finaliser
// (FNV alone clusters similar keys such as "10.0.0.1:80_1", "_2").
func Hash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
