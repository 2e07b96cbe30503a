package dataplane

import "time"

// Retry conditions as a bit set: Envoy's retry_on names (retryBits).
const (
	Retry5xx uint32 = 1 << iota
	RetryGatewayError
	RetryReset
	RetryConnectFailure
	RetryRetriable4xx
	RetryRefusedStream
	RetryUnavailable // gRPC status codes (x-envoy-retry-grpc-on names)
	RetryCancelled
	RetryDeadlineExceeded
	RetryResourceExhausted
	RetryInternal
)

var retryBits = map[string]uint32{
	"5xx": Retry5xx, "gateway-error": RetryGatewayError, "reset": RetryReset,
	"connect-failure": RetryConnectFailure, "retriable-4xx": RetryRetriable4xx,
	"refused-stream": RetryRefusedStream, "unavailable": RetryUnavailable,
	"cancelled": RetryCancelled, "deadline-exceeded": RetryDeadlineExceeded,
	"resource-exhausted": RetryResourceExhausted, "internal": RetryInternal,
}

// gRPC status codes the retry conditions name.
const (
	GRPCCancelled         = 1
	GRPCDeadlineExceeded  = 4
	GRPCResourceExhausted = 8
	GRPCInternal          = 13
	GRPCUnavailable       = 14
)

// Retry is a compiled retry policy.
type Retry struct {
	On            uint32 // Retry* bits
	NumRetries    int
	PerTryTimeout time.Duration // 0: each try is bounded by the route timeout only
	// BackoffBase and BackoffMax bound the wait before each retry (Backoff);
	// always set (Envoy's defaults, 25ms and 250ms, when the route says none).
	BackoffBase, BackoffMax time.Duration
}

// RetryStatus reports whether an upstream HTTP status should be retried.
func (r *Retry) RetryStatus(code int) bool {
	switch {
	case r.On&Retry5xx != 0 && code >= 500:
		return true
	case r.On&RetryGatewayError != 0 && (code == 502 || code == 503 || code == 504):
		return true
	case r.On&RetryRetriable4xx != 0 && code == 409:
		return true
	}
	return false
}

// RetryGRPC reports whether a grpc-status (in a response's headers: a
// trailers-only response) should be retried.
func (r *Retry) RetryGRPC(status int) bool {
	switch status {
	case GRPCCancelled:
		return r.On&RetryCancelled != 0
	case GRPCDeadlineExceeded:
		return r.On&RetryDeadlineExceeded != 0
	case GRPCResourceExhausted:
		return r.On&RetryResourceExhausted != 0
	case GRPCInternal:
		return r.On&RetryInternal != 0
	case GRPCUnavailable:
		return r.On&RetryUnavailable != 0
	}
	return false
}

// RetryConnect reports whether a failure to connect (reset false) or a reset
// before any response (reset true) should be retried. As Envoy: 5xx,
// gateway-error and reset cover both; connect-failure only the first.
func (r *Retry) RetryConnect(reset bool) bool {
	if r.On&(RetryReset|Retry5xx|RetryGatewayError) != 0 {
		return true
	}
	return !reset && r.On&RetryConnectFailure != 0
}

// RetryRefused reports whether a stream the upstream refused unprocessed
// (HTTP/2 REFUSED_STREAM, GOAWAY) should be retried: refused-stream, and, as
// Envoy, 5xx.
func (r *Retry) RetryRefused() bool { return r.On&(RetryRefusedStream|Retry5xx) != 0 }

// RetryTimeout reports whether a per-try timeout should be retried: Envoy
// treats it as a 504 from the upstream, so 5xx and gateway-error retry it.
func (r *Retry) RetryTimeout() bool { return r.On&(Retry5xx|RetryGatewayError) != 0 }

// Backoff is the wait before retry n (0 for the first) under r.
func (r *Retry) Backoff(n int, rnd uint64) time.Duration {
	return Backoff(r.BackoffBase, r.BackoffMax, n, rnd)
}

// Backoff is exponential back-off with full jitter (Envoy's
// JitteredExponentialBackOffStrategy): the wait before retry n (0 for the first)
// is uniform in [0, min(max, base×2^n)), drawn from rnd (a uniform uint64). Pure:
// no clock, no state.
func Backoff(base, max time.Duration, n int, rnd uint64) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	bound := max
	if n >= 0 && n < 63 && base <= max>>n {
		bound = base << n
	}
	return time.Duration(rnd % uint64(bound))
}
