// Package outlier is the passive health checker: Envoy's five detectors (consecutive
// 5xx, consecutive gateway errors, consecutive local-origin failures, success rate,
// failure percentage) as a pure, tick-driven core. It reads no clock: callers pass
// now. Per-host state lives in long-lived Host values that outlast config swaps.
//
// It follows Envoy's outlier_detection_impl.cc, with these deliberate differences:
//   - A consecutive detector ejects inside the request's Trip call (Envoy posts it to
//     its main thread): the very next pick already skips the host.
//   - A host returns as soon as its ejection time is served (Tick runs then; Envoy
//     checks at interval ticks only), so "returns after base × n" is exact.
//   - maxEjectionPercent is a hard cap: floor(percent × hosts / 100), raised to one
//     when that is 0 and the percent is not (Envoy ≥ 1.29 ejects that one only with
//     always_eject_one_host); a lower percent or fewer hosts return the excess at once
//     (Envoy only refuses new ejections).
//   - Jitter is uniform in [0, maxEjectionTimeJitter) at nanosecond resolution
//     (Envoy: 0..jitter inclusive, in milliseconds).
//   - A removed host that was ejected returns (its state goes with it).
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
