package httpproxy

import (
	"bufio"
	"net/http"
	"time"

	"github.com/weft-mesh/weft/sidecar/dataplane"
)

// Headers on answers the sidecar gives itself when a bound of its own is hit.
const (
	// OverflowHeader names the sidecar limit that refused a request (503).
	OverflowHeader = "x-weft-overflow"
	// TimeoutHeader names the timeout that ended a request (504):
	// "route=2s" (the Route's), "default=15s" (the sidecar's default route
	// timeout, the Route set none), "per-try=500ms" or "grpc-timeout=1s" (the
	// client's, shorter than the route's).
	TimeoutHeader = "x-weft-timeout"
)

// Values of OverflowHeader.
const (
	OverflowRequests = "requests" // the listener's MaxRequests
	OverflowMemory   = "memory"   // the memory high-water mark
)

// admit takes a request slot for a new request; it returns "" when admitted (the
// caller then calls t.Requests.Release), otherwise which bound refused it. One
// atomic load and, unless shed, one atomic add: nothing allocated.
func (p *Proxy) admit(t *Target) string {
	if p.cfg.Memory.Shedding() {
		p.cfg.Memory.Shed()
		return OverflowMemory
	}
	if !t.Requests.Acquire() {
		return OverflowRequests
	}
	return ""
}

// timeoutValue is the TimeoutHeader value for a request that timed out on route;
// routeDeadline says the route's own deadline had passed (not only a per-try one).
// It allocates, on the timeout path only.
func timeoutValue(route *dataplane.Route, routeDeadline bool) string {
	switch {
	case !routeDeadline && route.Retry != nil && route.Retry.PerTryTimeout > 0:
		return "per-try=" + route.Retry.PerTryTimeout.String()
	case route.DefaultTimeout:
		return "default=" + route.Timeout.String()
	default:
		return "route=" + route.Timeout.String()
	}
}

// overflowH1 answers an HTTP/1.1 request refused by a sidecar bound.
func (p *Proxy) overflowH1(br *bufio.Reader, bw *bufio.Writer, st *h1state, which string) bool {
	return p.discardAndReplyHeader(br, bw, st, http.StatusServiceUnavailable, LocalOverflow, OverflowHeader, which, overflowBody(which))
}

// timeoutH1 answers an HTTP/1.1 request whose upstream did not answer in time.
func (p *Proxy) timeoutH1(bw *bufio.Writer, st *h1state, route *dataplane.Route, deadline time.Time) {
	routeDeadline := !deadline.IsZero() && !time.Now().Before(deadline)
	p.writeReply(bw, st, http.StatusGatewayTimeout, LocalTimeout, TimeoutHeader, timeoutValue(route, routeDeadline), "upstream request timeout", true)
}

// overflowBody is the body of an overflow answer; constant strings, so a refusal
// allocates nothing.
func overflowBody(which string) string {
	switch which {
	case OverflowMemory:
		return "sidecar overloaded: memory high-water mark reached"
	case OverflowRequests:
		return "sidecar overloaded: listener's concurrent request limit reached"
	}
	return "sidecar overloaded"
}
