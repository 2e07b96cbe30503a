package outlier

import (
	"sync/atomic"
	"time"
)

// Host is one endpoint's outlier state. It is long-lived (cluster.Host holds it by
// value, across configurations) and must not be copied once in use.
//
// The request path touches only the atomics, through Detector.Observe; everything
// else belongs to the Detector whose member the host is, under its mu.
type Host struct {
	// Addr is the host's "ip:port", for events; set before the host is shared.
	Addr string

	ejected     atomic.Bool
	cons5xx     atomic.Uint32
	consGateway atomic.Uint32
	consLocal   atomic.Uint32
	// ext and local count the current interval's outcomes as total<<32 | successes,
	// one atomic add each, so the interval tick reads a consistent pair with one swap.
	// 2^32 outcomes per host per interval would overflow: at a million requests a
	// second that is a 71-minute interval.
	ext, local atomic.Uint64

	// Owned by the Detector (its mu).
	member     bool
	keep       bool   // SetHosts' mark
	multiplier uint32 // Envoy's ejectTimeBackoff
	ejections  uint64 // ever
	since      time.Time
	until      time.Time
	lastReturn time.Time // zero: never returned
	kind       Kind
	nums       Numbers
}

const (
	oneTotal   = 1 << 32
	oneSuccess = oneTotal | 1
)

// Ejected reports whether the host is ejected: the pickers' one atomic load.
func (h *Host) Ejected() bool { return h.ejected.Load() }

// Trips is the set of consecutive detectors one outcome tripped.
type Trips uint8

// Trip bits.
const (
	TripGateway Trips = 1 << iota
	Trip5xx
	TripLocalOrigin
)

func zero(c *atomic.Uint32) {
	if c.Load() != 0 { // no write, so no cache-line transfer, in the common case
		c.Store(0)
	}
}

// status counts an upstream status code (a local-origin result mapped to one when
// the split is off). A consecutive counter trips when it reaches its threshold
// exactly, so exactly one request of a run trips it.
func (h *Host) status(c *Config, code uint16) Trips {
	if code < 500 || code > 599 {
		h.ext.Add(oneSuccess)
		zero(&h.cons5xx)
		zero(&h.consGateway)
		return 0
	}
	h.ext.Add(oneTotal)
	var t Trips
	if code == 502 || code == 503 || code == 504 {
		if n := h.consGateway.Add(1); n == c.ConsecutiveGatewayFailure {
			t |= TripGateway
		}
	} else {
		zero(&h.consGateway)
	}
	if n := h.cons5xx.Add(1); n == c.Consecutive5xx {
		t |= Trip5xx
	}
	return t
}

func (h *Host) localSuccess() {
	h.local.Add(oneSuccess)
	zero(&h.consLocal)
}

func (h *Host) localFailure(c *Config) Trips {
	h.local.Add(oneTotal)
	if n := h.consLocal.Add(1); n == c.ConsecutiveLocalOriginFailure {
		return TripLocalOrigin
	}
	return 0
}

// Status codes a local-origin failure counts as when the split is off (Envoy's
// resultToHttpCode): a connect failure or a reset (Envoy reports both as
// LOCAL_ORIGIN_CONNECT_FAILED) is a 503, a timeout a 504; both are 5xx and gateway
// errors. A connect success is not counted (Envoy: it says nothing about the
// response that follows).
const (
	connectFailedStatus = 503
	timeoutStatus       = 504
)

func unpack(v uint64) (total, success uint64) { return v >> 32, v & (1<<32 - 1) }
