// Package staleness decides how far a sidecar may trust each class of state it
// holds while it cannot reach pilot. It is pure and tick-driven: callers pass the
// time the state was last confirmed and now; nothing here reads a clock.
//
// Age = now - lastConfirmed. Per class, a Policy maps age to a Level:
// FRESH < warnAfter <= WARN < restrictAfter <= RESTRICTED < expireAfter <= EXPIRED.
// A zero threshold is "never". Expiry can also come from an absolute deadline
// (certificate NotAfter, CRL NextUpdate) plus the policy's Grace, whichever is first.
// Jitter shortens the age-based expiry by a per-node, per-class fraction of up to
// Jitter percent, so a fleet that lost pilot at the same moment does not expire at
// the same moment; the same node always gets the same fraction.
package staleness

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"
)

// Class is a resource class with its own staleness policy.
type Class string

// Classes, as named in StalenessPolicy rules.
const (
	Listeners     Class = "listeners"
	Routes        Class = "routes"
	Clusters      Class = "clusters"
	Endpoints     Class = "endpoints"
	Secrets       Class = "secrets"
	Revocation    Class = "revocation"
	Authorization Class = "authorization"
)

// Classes lists every class in display order.
func Classes() []Class {
	return []Class{Listeners, Routes, Clusters, Endpoints, Secrets, Revocation, Authorization}
}

func (c Class) valid() bool {
	for _, k := range Classes() {
		if c == k {
			return true
		}
	}
	return false
}

// Action is what expiry does to a class.
type Action string

const (
	// ServeStale keeps using the state (endpoints: outlier detection still ejects:
	// detectors are configured at activation and ticked by the sidecar's own
	// goroutine, never by the stream; runtime's TestEjectionWhileEndpointsStale).
	ServeStale Action = "serveStale"
	// FailClosed refuses what depends on the state (routing: 503 with a reason header;
	// secrets/revocation: refuse new mTLS handshakes).
	FailClosed Action = "failClosed"
	// Drop removes the state as if it had never been received (listeners, routes,
	// clusters, endpoints: nothing is left to route with, so requests fail closed with
	// the same reason header as FailClosed).
	Drop Action = "drop"
)

func (a Action) valid() bool { return a == ServeStale || a == FailClosed || a == Drop }

// Level is a class's staleness state.
type Level int

const (
	Fresh Level = iota
	Warn
	Restricted
	Expired
)

func (l Level) String() string {
	switch l {
	case Fresh:
		return "FRESH"
	case Warn:
		return "WARN"
	case Restricted:
		return "RESTRICTED"
	case Expired:
		return "EXPIRED"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Policy for one class. Zero durations mean "never".
type Policy struct {
	Class         Class
	WarnAfter     time.Duration
	RestrictAfter time.Duration
	ExpireAfter   time.Duration
	OnExpire      Action
	Jitter        int           // percent, 0..MaxJitter
	Grace         time.Duration // added to an absolute deadline
}

// State is the verdict for one class at one instant.
type State struct {
	Class Class
	Level Level
	Age   time.Duration
	// Action is OnExpire when Level is Expired, empty otherwise.
	Action Action
	// ExpiresAt is when the class expires (after jitter and any deadline); zero if
	// it never does.
	ExpiresAt time.Time
	// Next is when Level next changes; zero if it never will. A caller schedules its
	// next tick no later than this.
	Next time.Time
	// Reason says why, in words, for /config_dump, readiness and the 503 header.
	Reason string
}

// Seed derives a node's jitter seed from its id.
func Seed(nodeID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(nodeID))
	return h.Sum64()
}

// jitterFraction is a deterministic value in [0, 1) for (seed, class).
func jitterFraction(seed uint64, c Class) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(c))
	return float64(h.Sum64()>>11) / float64(uint64(1)<<53)
}

// EffectiveExpireAfter is ExpireAfter shortened by this node's jitter.
func (p Policy) EffectiveExpireAfter(seed uint64) time.Duration {
	if p.ExpireAfter <= 0 || p.Jitter <= 0 {
		return p.ExpireAfter
	}
	cut := time.Duration(float64(p.ExpireAfter) * float64(min(p.Jitter, MaxJitter)) / 100 * jitterFraction(seed, p.Class))
	return p.ExpireAfter - cut
}

// Evaluate judges a class by age alone.
func Evaluate(p Policy, lastConfirmed, now time.Time, seed uint64) State {
	return EvaluateWithDeadline(p, lastConfirmed, time.Time{}, now, seed)
}

// EvaluateWithDeadline also applies an absolute deadline (zero: none): the class
// expires at deadline+Grace if that comes before its age-based expiry.
func EvaluateWithDeadline(p Policy, lastConfirmed, deadline, now time.Time, seed uint64) State {
	s := State{Class: p.Class}
	if lastConfirmed.IsZero() {
		s.Level, s.Action = Expired, p.OnExpire
		s.Reason = fmt.Sprintf("%s: never confirmed", p.Class)
		return s
	}
	s.Age = max(now.Sub(lastConfirmed), 0) // a clock stepping back is not negative age
	expireAfter := p.EffectiveExpireAfter(seed)
	ageExpiry := false
	if expireAfter > 0 {
		s.ExpiresAt = lastConfirmed.Add(expireAfter)
		ageExpiry = true
	}
	if !deadline.IsZero() {
		if d := deadline.Add(p.Grace); s.ExpiresAt.IsZero() || d.Before(s.ExpiresAt) {
			s.ExpiresAt, ageExpiry = d, false
		}
	}
	switch {
	case !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt):
		s.Level, s.Action = Expired, p.OnExpire
		if ageExpiry {
			s.Reason = fmt.Sprintf("%s: age %v reached expireAfter %v", p.Class, s.Age, expireAfter)
		} else {
			s.Reason = fmt.Sprintf("%s: past deadline %s (grace %v)", p.Class, deadline.UTC().Format(time.RFC3339), p.Grace)
		}
		return s
	case p.RestrictAfter > 0 && s.Age >= p.RestrictAfter:
		s.Level = Restricted
		s.Reason = fmt.Sprintf("%s: age %v reached restrictAfter %v", p.Class, s.Age, p.RestrictAfter)
	case p.WarnAfter > 0 && s.Age >= p.WarnAfter:
		s.Level = Warn
		s.Reason = fmt.Sprintf("%s: age %v reached warnAfter %v", p.Class, s.Age, p.WarnAfter)
	default:
		s.Reason = fmt.Sprintf("%s: age %v", p.Class, s.Age)
	}
	s.Next = s.ExpiresAt
	for _, th := range []time.Duration{p.WarnAfter, p.RestrictAfter} {
		if th > 0 && s.Age < th {
			if t := lastConfirmed.Add(th); s.Next.IsZero() || t.Before(s.Next) {
				s.Next = t
			}
		}
	}
	return s
}
