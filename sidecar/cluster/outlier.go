package cluster

import (
	"slices"
	"time"

	"github.com/weft-mesh/weft/sidecar/outlier"
)

// Observe records the outcome of one request to e for outlier detection, once per
// upstream attempt. It is lock-free and allocation-free; only the outcome that
// completes a consecutive-failure run (rare) takes the detector's lock, reads the
// clock and records the ejection, so the hosts it ejects are skipped from the very
// next pick, as Envoy ejects inline.
func (c *Cluster) Observe(e *Endpoint, o outlier.Outcome) {
	h := e.Host
	if h == nil {
		return
	}
	d := c.Shared.Outlier
	if t := d.Observe(&h.Outlier, o); t != 0 {
		if ev, ok := d.Trip(&h.Outlier, t, time.Now(), c.rnd); ok {
			c.Shared.reg.outliers.Record(ev)
		}
	}
}

// Panic-mode verdict bits, cached in Cluster.health with the detector generation
// they were computed at.
const (
	healthSkip     = 1 << iota // some pickable endpoint is ejected: pickers skip ejected hosts
	healthPanic                // usable share below PanicThreshold: ejections ignored
	healthNone                 // every pickable endpoint is ejected (and no panic): no endpoint
	healthIgnoring             // panic with some pickable endpoint ejected: an ejection is ignored
	healthBits     = 8
	healthFlags    = 1<<healthBits - 1
)

// healthState returns the cluster's panic-mode verdict: two atomic loads while no
// host was ejected or returned since it was last computed.
func (c *Cluster) healthState() uint64 {
	g := c.Shared.Outlier.Generation()
	if s := c.health.Load(); s>>healthBits == g+1 {
		return s & healthFlags
	}
	return c.computeHealth(g)
}

// computeHealth judges the cluster at detector generation g (read before the hosts,
// so an ejection during the count leaves a stale generation and a recount).
//
// Panic mode (Envoy's healthy_panic_threshold, the API's minHealthPercent): when
// the usable hosts (EDS-healthy and not ejected) are fewer than PanicThreshold
// percent of the cluster's endpoints, ejections are ignored. Threshold 0 never
// panics: with every host ejected, Pick then finds no endpoint (and the route
// falls back). Unlike Envoy, panic does not add EDS-unhealthy hosts to the
// choice: those are picked only when no host is healthy, as before.
func (c *Cluster) computeHealth(g uint64) uint64 {
	usable, ejectedPickable := 0, 0
	for _, e := range c.endpoints {
		if e.Healthy && !e.Host.Outlier.Ejected() {
			usable++
		}
	}
	for _, e := range c.usable {
		if e.Host.Outlier.Ejected() {
			ejectedPickable++
		}
	}
	var f uint64
	if n := len(c.endpoints); n > 0 && float64(usable)*100 < c.panicThreshold*float64(n) {
		f |= healthPanic
	}
	switch {
	case ejectedPickable > 0 && f&healthPanic != 0:
		f |= healthIgnoring
	case ejectedPickable > 0:
		f |= healthSkip
		if ejectedPickable == len(c.usable) {
			f |= healthNone
		}
	}
	c.health.Store((g+1)<<healthBits | f)
	return f
}

// Panic reports whether the cluster is in panic mode: its usable share is below
// PanicThreshold, so ejections are ignored (the /metrics gauge).
func (c *Cluster) Panic() bool { return c.healthState()&healthPanic != 0 }

// PanicThreshold is the cluster's panic threshold, in percent.
func (c *Cluster) PanicThreshold() float64 { return c.panicThreshold }

// pickable reports whether PickAvoiding's scan may return e: not an ejected host,
// unless ejections are ignored.
func (c *Cluster) pickable(e *Endpoint) bool {
	return c.healthState()&healthSkip == 0 || !e.Host.Outlier.Ejected()
}

func ejected(e *Endpoint) bool { return e.Host.Outlier.Ejected() }

// Ejections returns every current ejection of the registry's services, by service
// key then member order (the report to pilot, admin /outliers).
func (r *Registry) Ejections() []outlier.Ejection {
	var out []outlier.Ejection
	for _, s := range r.All() {
		out = s.Outlier.Ejections(out)
	}
	return out
}

// OutlierEvents is the registry's outlier event recorder: the request path's
// ejections and the ticks' events land there for the log and /outliers.
func (r *Registry) OutlierEvents() *outlier.Recorder { return r.outliers }

// OutlierTotals are the verdicts of every detector the registry ever had.
func (r *Registry) OutlierTotals() outlier.Stats { return r.totals.Stats() }

// TickOutliers ticks every detector that has work at now, records the events, and
// returns when the next one has (zero: none has any scheduled; Recorder.Wake
// signals when that changes).
func (r *Registry) TickOutliers(now time.Time, rnd func() uint64) time.Time {
	var next time.Time
	var evs []outlier.Event
	for _, s := range r.All() {
		d := s.Outlier
		at, ok := d.Next()
		if !ok {
			continue
		}
		if !at.After(now) {
			evs = d.Tick(now, rnd, evs[:0])
			r.outliers.Record(evs...)
			if at, ok = d.Next(); !ok {
				continue
			}
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// syncOutlierLocked makes the detector's members the Shared's hosts (those the
// live configuration uses), in address order. The caller holds reg.mu.
func (s *Shared) syncOutlierLocked() {
	hs := make([]*outlier.Host, 0, len(s.hosts))
	addrs := make([]*Host, 0, len(s.hosts))
	for _, h := range s.hosts {
		addrs = append(addrs, h)
	}
	slices.SortFunc(addrs, func(a, b *Host) int { return a.Addr.Compare(b.Addr) })
	for _, h := range addrs {
		hs = append(hs, &h.Outlier)
	}
	s.Outlier.SetHosts(hs)
}
