package httpproxy

import (
	"bufio"
	"net/http"
	"strconv"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
)

// Local rate limit answers (429): x-weft-local: ratelimit, RateLimitedHeader
// naming the service key whose limit refused the request (subset clusters of a
// Service share it; an inbound cluster is its own key) and retry-after in whole
// seconds, rounded up.
const (
	LocalRateLimit    = "ratelimit"
	RateLimitedHeader = "x-weft-ratelimited"
	rateLimitedBody   = "local rate limit exceeded"
)

// rateLimited takes a token from c's limiter at the request's start (read once
// for the request: no clock read here) and reports whether the request must be
// refused, and for how long. Clusters without a limit cost one atomic load.
func rateLimited(c *cluster.Cluster, start time.Time) (refused bool, retryAfter time.Duration) {
	ok, wait := c.Shared.Limiter.Allow(start)
	return !ok, wait
}

// retryAfterValue is the retry-after header value; below 100 s (every limit above
// 0.01 rps) strconv returns a constant string, so the answer allocates nothing.
func retryAfterValue(wait time.Duration) string {
	return strconv.FormatInt(ratelimit.RetryAfterSeconds(wait), 10)
}

// rateLimitedH1 answers an HTTP/1.1 request refused by c's rate limit. A body
// kept for replay (a fallback refused) was read already: nothing to discard.
func (p *Proxy) rateLimitedH1(br *bufio.Reader, bw *bufio.Writer, st *h1state, c *cluster.Cluster, wait time.Duration) bool {
	if st.kept {
		closeAfter := st.req.close
		p.writeReplyHeaders(bw, st, http.StatusTooManyRequests, LocalRateLimit, rateLimitedBody, closeAfter,
			"retry-after", retryAfterValue(wait), RateLimitedHeader, c.Shared.Key)
		return !closeAfter
	}
	return p.discardAndReplyHeaders(br, bw, st, http.StatusTooManyRequests, LocalRateLimit, rateLimitedBody,
		"retry-after", retryAfterValue(wait), RateLimitedHeader, c.Shared.Key)
}

// rateLimitedH2 answers a request of the general path refused by c's rate limit
// (a gRPC caller gets UNAVAILABLE, as Envoy maps 429). It returns the status sent.
func (p *Proxy) rateLimitedH2(w http.ResponseWriter, r *http.Request, c *cluster.Cluster, wait time.Duration) int {
	h := w.Header()
	h.Set("Retry-After", retryAfterValue(wait))
	h.Set(RateLimitedHeader, c.Shared.Key)
	return p.errorReply(w, r, http.StatusTooManyRequests, LocalRateLimit, rateLimitedBody)
}
