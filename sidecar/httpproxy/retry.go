package httpproxy

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// # Retries and fallback
//
// A route's retry policy retries a failed attempt on the same cluster (another
// host when there is one: cluster.PickAvoiding) after a fully jittered
// exponential back-off (dataplane.Backoff), at most NumRetries times, each retry
// holding a circuitbreak.Retries token (max retries, and the retry budget) from
// its decision until its outcome is judged, or its answer streamed: as Envoy's
// RetryState, a request holds at most one. A retry the breaker refuses is not
// made (counted) and the failed answer is forwarded. Conditions are Envoy's
// retry_on (dataplane.Retry); gRPC status conditions apply to trailers-only
// answers (a status after messages comes too late to retry). The route timeout bounds all tries and
// back-offs together: a retry whose back-off would end past it is not made, and
// the failed answer in hand is forwarded instead (Envoy would wait and answer
// 504). The per-try timeout bounds each attempt inside the route timeout.
//
// When the cluster's tries are used up, or it has no host to pick, the route's
// fallback clusters are tried in priority order inside the same request, at
// once (no back-off), on a failure before a response (connect failure, reset,
// per-try timeout, overflow, no host), a gateway error (502, 503, 504) or any
// status the retry policy retries. Every answer on a route with fallbacks says
// which priority produced it: x-weft-priority 0 for the route's own
// destinations, n for fallback[n-1] (PriorityHeader).
//
// A request with a body is retried, or sent to a fallback, only when its body
// was kept for replay: at most Config.MaxRetryBodyBytes. A larger body (or, on
// HTTP/1.1, one behind Expect: 100-continue) is sent once and the reason counted
// (RetryStats.BodyNotBuffered). An HTTP/1.1 body of known length is read whole
// before the first attempt; a chunked one goes through the general path, which
// keeps a copy while it streams.
//
// # Outcomes for outlier detection
//
// Every attempt that reached a host reports one outcome (cluster.Observe): the
// response status; ConnectFailed when no connection could be made; Reset when
// the connection failed, or the response was malformed, before a complete
// response head (on the general path also a gRPC stream cut mid-body);
// Timeout when the per-try or route timeout fired first. A gRPC response
// reports its grpc-status mapped to HTTP as Envoy's grpcToHttpStatus does
// (grpcOutcome: UNAVAILABLE 503, DEADLINE_EXCEEDED 504, INTERNAL, UNKNOWN and
// DATA_LOSS 500, ...), read from a trailers-only response's headers or from the
// trailers at the end of the stream, so an application failing every RPC is
// ejected by the 5xx detectors though its HTTP status is 200. Attempts refused
// locally (overflow, no host) and ones the client or a drain cut short report
// nothing.

// PriorityHeader names the priority that answered, on routes with fallbacks.
const PriorityHeader = "x-weft-priority"

// Body replay bounds: Config.MaxRetryBodyBytes.
const (
	DefaultMaxRetryBodyBytes = 64 << 10
	MinMaxRetryBodyBytes     = 1 << 10
	MaxMaxRetryBodyBytes     = 16 << 20
)

// maxTries bounds the attempts on one cluster: dataplane's retries are at most
// xdsresource.MaxRetries (10), plus the first.
const maxTries = 11

// Why a request's body was not kept for replay (RetryStats.BodyNotBuffered).
const (
	NotBufferedTooLarge = iota // longer than Config.MaxRetryBodyBytes
	NotBufferedExpect          // HTTP/1.1 Expect: 100-continue: the upstream is asked first
	numNotBuffered
)

// NotBufferedReasons are the metric label values of the NotBuffered* indexes.
var NotBufferedReasons = [numNotBuffered]string{"too-large", "expect-continue"}

// RetryStats counts what retries and fallbacks did; atomics only, read by the
// admin collector.
type RetryStats struct {
	Retries          atomic.Uint64 // retry attempts made
	RetriesRefused   atomic.Uint64 // retries not made: the breaker (max retries, budget) refused
	RetriesNoTime    atomic.Uint64 // retries not made: the back-off would pass the route timeout
	BodyNotBuffered  [numNotBuffered]atomic.Uint64
	FallbackAnswered [xdsMaxFallbacks + 1]atomic.Uint64 // answers by priority; [0] is unused (not counted)
}

// xdsMaxFallbacks is xdsresource.MaxFallbacks: the highest priority.
const xdsMaxFallbacks = 8

// RetryStats returns the proxy's retry counters.
func (p *Proxy) RetryStats() *RetryStats { return &p.retries }

// countFallback counts an answer from priority prio (> 0).
func (p *Proxy) countFallback(prio int) {
	if prio > 0 {
		p.retries.FallbackAnswered[min(prio, xdsMaxFallbacks)].Add(1)
	}
}

// priorityValue is the PriorityHeader value for prio (0..8: no allocation).
func priorityValue(prio int) string { return strconv.Itoa(prio) }

// step is what follows a failed attempt.
type step uint8

const (
	stepNone     step = iota // answer with this attempt's result
	stepRetry                // retry on the same cluster after the back-off
	stepFallback             // go to the next priority at once
)

// tries is one request's retry state on its current cluster.
type tries struct {
	attempt  int  // attempts made on this cluster so far, minus one
	retries  int  // retries allowed on this cluster
	fallback bool // a fallback cluster follows and the request can be replayed
	token    bool // a Retries token is held for the retry being made
	wait     time.Duration
	tried    [maxTries]*cluster.Endpoint
	ntried   int
}

func (t *tries) reset(retries int, fallback bool) {
	clear(t.tried[:t.ntried]) // only what was used: the request path pays for no more
	t.attempt, t.retries, t.fallback, t.token, t.wait, t.ntried = 0, min(retries, maxTries-1), fallback, false, 0, 0
}

func (t *tries) add(e *cluster.Endpoint) {
	if t.ntried < len(t.tried) {
		t.tried[t.ntried] = e
		t.ntried++
	}
}

func (t *tries) triedHosts() []*cluster.Endpoint { return t.tried[:t.ntried] }

// retryCause says what failed, for the retry conditions.
type retryCause uint8

const (
	causeStatus  retryCause = iota // a response with status code
	causeConnect                   // no connection
	causeReset                     // reset before a response head
	causeTimeout                   // the per-try timeout
	causeGRPC                      // a gRPC response whose grpc-status (the status argument) is in its headers
	causeRefused                   // HTTP/2: the upstream refused the stream unprocessed (REFUSED_STREAM, GOAWAY)
	causeLocal                     // overflow or no host: not retried on this cluster, falls back
)

// decide says what follows a failed attempt on c (cause; status for causeStatus).
// It is called only on failure, so its clock read and random draw cost nothing
// on a request answered at the first try. As Envoy's RetryState, it first gives
// back the token of the retry it judges, so a request holds at most one; on
// stepRetry it has taken one for the next (t.token) and drawn the back-off
// (t.wait).
func (p *Proxy) decide(t *tries, route *dataplane.Route, c *cluster.Cluster, cause retryCause, status int, deadline time.Time) step {
	t.release(c)
	switch {
	case cause == causeStatus && !p.failedStatus(route, status, t.fallback):
		return stepNone
	case cause == causeGRPC && !failedGRPC(route, status, t.fallback):
		return stepNone
	}
	if r := route.Retry; r != nil && t.attempt < t.retries && retriable(r, cause, status) {
		if c.Breaker.Acquire(circuitbreak.Retries) {
			wait := r.Backoff(t.attempt, p.cfg.Rand())
			if deadline.IsZero() || time.Now().Add(wait).Before(deadline) {
				t.token, t.wait = true, wait
				return stepRetry
			}
			c.Breaker.Release(circuitbreak.Retries)
			p.retries.RetriesNoTime.Add(1)
		} else {
			p.retries.RetriesRefused.Add(1)
		}
	}
	if t.fallback && fallbackOn(route, cause, status) && (deadline.IsZero() || time.Now().Before(deadline)) {
		return stepFallback
	}
	return stepNone
}

// failedStatus is the cheap first test of a response: may anything follow it?
func (p *Proxy) failedStatus(route *dataplane.Route, status int, fallback bool) bool {
	if fallback && status >= 502 && status <= 504 {
		return true
	}
	return route.Retry != nil && route.Retry.RetryStatus(status)
}

// failedGRPC is failedStatus for a grpc-status: UNAVAILABLE falls back as a 503
// does; otherwise what the policy's gRPC conditions name.
func failedGRPC(route *dataplane.Route, status int, fallback bool) bool {
	if fallback && status == dataplane.GRPCUnavailable {
		return true
	}
	return route.Retry != nil && route.Retry.RetryGRPC(status)
}

func retriable(r *dataplane.Retry, cause retryCause, status int) bool {
	switch cause {
	case causeGRPC:
		return r.RetryGRPC(status)
	case causeStatus:
		return r.RetryStatus(status)
	case causeConnect:
		return r.RetryConnect(false)
	case causeReset:
		return r.RetryConnect(true)
	case causeTimeout:
		return r.RetryTimeout()
	case causeRefused:
		return r.RetryRefused()
	}
	return false
}

func fallbackOn(route *dataplane.Route, cause retryCause, status int) bool {
	switch cause {
	case causeGRPC:
		return failedGRPC(route, status, true)
	case causeStatus:
	default:
		return true
	}
	return status >= 502 && status <= 504 || route.Retry != nil && route.Retry.RetryStatus(status)
}

// release gives back the Retries token held for the retry that just ended, if any.
func (t *tries) release(c *cluster.Cluster) {
	if t.token {
		t.token = false
		c.Breaker.Release(circuitbreak.Retries)
	}
}

// grpcOutcome maps a grpc-status to the HTTP status outlier detection sees
// (Envoy's Grpc::Utility::grpcToHttpStatus); ok false for a value that is not
// a status code.
func grpcOutcome(s string) (outlier.Outcome, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	code := http.StatusInternalServerError
	switch n {
	case 0:
		code = http.StatusOK
	case 1: // CANCELLED
		code = 499
	case 2, 13, 15: // UNKNOWN, INTERNAL, DATA_LOSS
		code = http.StatusInternalServerError
	case 3, 9, 11: // INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
		code = http.StatusBadRequest
	case 4:
		code = http.StatusGatewayTimeout
	case 5:
		code = http.StatusNotFound
	case 6, 10: // ALREADY_EXISTS, ABORTED
		code = http.StatusConflict
	case 7:
		code = http.StatusForbidden
	case 8:
		code = http.StatusTooManyRequests
	case 12:
		code = http.StatusNotImplemented
	case 14:
		code = http.StatusServiceUnavailable
	case 16:
		code = http.StatusUnauthorized
	}
	return outlier.Outcome(code), true
}

// sleep waits d unless done closes first (false then). The timer is the
// caller's, reused: only a retry waits, and it allocates nothing after its first.
func sleep(tm **time.Timer, d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	if *tm == nil {
		*tm = time.NewTimer(d)
	} else {
		(*tm).Reset(d)
	}
	select {
	case <-(*tm).C:
		return true
	case <-done:
		(*tm).Stop()
		return false
	}
}

// decideStatus is decide for the failed status in st.resp, before it is
// forwarded: true means it is dropped and st.step says what follows.
func (p *Proxy) decideStatus(st *h1state, route *dataplane.Route, c *cluster.Cluster, deadline time.Time) bool {
	st.step = p.decide(&st.try, route, c, causeStatus, st.resp.status, deadline)
	return st.step != stepNone
}
