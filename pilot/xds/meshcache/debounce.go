package meshcache

import "time"

// debouncer decides when a burst of changes is compiled. Two kinds of change,
// each with its own window: a store change (an operator's apply) waits for
// Debounce of quiet, at most MaxDelay from the burst's first store change; a
// registration (a registering proxy connecting or leaving) waits for
// RegistrationDebounce of quiet, at most RegistrationMaxDelay from the burst's
// first registration. A compile of 2,000 sidecars joining is one push of the
// Service's grown endpoints to every proxy per window, not one per sidecar,
// and the window is wider than a store change's because each push of a large
// assignment to every stream costs the whole fleet's bandwidth. A burst with
// both kinds compiles at the earlier of the two deadlines, taking everything.
//
// Pure: the caller passes now, arms a timer for Due and calls Fire when it goes
// off. Owned by the meshcache loop.
type debouncer struct {
	storeQuiet, storeMax time.Duration
	regQuiet, regMax     time.Duration

	storeFirst, storeLast time.Time // zero: no store change pending
	regFirst, regLast     time.Time // zero: no registration pending
}

// Store records a store change at now.
func (d *debouncer) Store(now time.Time) {
	if d.storeFirst.IsZero() {
		d.storeFirst = now
	}
	d.storeLast = now
}

// Registration records a registration change at now.
func (d *debouncer) Registration(now time.Time) {
	if d.regFirst.IsZero() {
		d.regFirst = now
	}
	d.regLast = now
}

// Due is when the pending burst is compiled; ok is false when nothing is
// pending.
func (d *debouncer) Due() (at time.Time, ok bool) {
	if !d.storeFirst.IsZero() {
		at, ok = earliest(d.storeLast.Add(d.storeQuiet), d.storeFirst.Add(d.storeMax)), true
	}
	if !d.regFirst.IsZero() {
		r := earliest(d.regLast.Add(d.regQuiet), d.regFirst.Add(d.regMax))
		if !ok || r.Before(at) {
			at = r
		}
		ok = true
	}
	return at, ok
}

// Fire clears the pending burst: the caller compiles it now.
func (d *debouncer) Fire() {
	d.storeFirst, d.storeLast, d.regFirst, d.regLast = time.Time{}, time.Time{}, time.Time{}, time.Time{}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
