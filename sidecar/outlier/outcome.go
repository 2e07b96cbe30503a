// Package outlier is the passive health checker: Envoy's five detectors (consecutive
// 5xx, consecutive gateway errors, consecutive local-origin failures, success rate,
// failure percentage) as a pure, tick-driven core. It reads no clock: callers pass
// now. Per-host state lives in long-lived Host values that outlast config swaps.
package outlier

// Outcome is what one request to a host came to: an upstream HTTP status (100..599;
// a gRPC status is mapped by the caller) or one of the local-origin results below.
type Outcome uint16

// Local-origin outcomes (Envoy's LOCAL_ORIGIN_*): failures seen by this sidecar,
// not answers from the upstream. They are below 100 so they never collide with a
// status code.
const (
	// ConnectFailed: no connection (refused, unreachable, connect timeout).
	ConnectFailed Outcome = 1 + iota
	// Reset: the connection failed or closed before a complete response head.
	Reset
	// Timeout: the per-try or route timeout fired before a response head.
	Timeout
	// ConnectSucceeded: a connection (or TCP proxy session) was established; a
	// local-origin success, as Envoy's LOCAL_ORIGIN_CONNECT_SUCCESS.
	ConnectSucceeded
)

// LocalOrigin reports whether o is a local-origin result rather than a status.
func (o Outcome) LocalOrigin() bool { return o < 100 }
