package admin

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/httpproxy"
)

// RetryCollector exports what retries and fallbacks did (httpproxy.RetryStats):
// atomics only, so a scrape never blocks the request path.
type RetryCollector struct {
	s                             *httpproxy.RetryStats
	retries, refused, noTime      *prometheus.Desc
	notBuffered, fallbackAnswered *prometheus.Desc
}

// NewRetryCollector exports s.
func NewRetryCollector(s *httpproxy.RetryStats) (*RetryCollector, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: RetryCollector: nil RetryStats", ErrConfig)
	}
	return &RetryCollector{s: s,
		retries:     prometheus.NewDesc("weft_sidecar_http_retries_total", "Retry attempts made (a Route's retries policy).", nil, nil),
		refused:     prometheus.NewDesc("weft_sidecar_http_retries_refused_total", "Retries not made because the circuit breaker refused them (maxRetries, retryBudget).", nil, nil),
		noTime:      prometheus.NewDesc("weft_sidecar_http_retries_past_timeout_total", "Retries not made because the back-off would end past the route timeout; the failed answer was forwarded.", nil, nil),
		notBuffered: prometheus.NewDesc("weft_sidecar_http_retry_body_not_kept_total", "Requests with a body on a route with retries or fallbacks whose body was not kept for replay (so not retried), by reason: too-large (over --max-retry-body), expect-continue (HTTP/1.1 Expect: 100-continue).", []string{"reason"}, nil),
		fallbackAnswered: prometheus.NewDesc("weft_sidecar_http_fallback_answers_total",
			"Responses answered by a Route's fallback destination, by priority (1: fallback[0]); the x-weft-priority header of the answer.", []string{"priority"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *RetryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.retries, c.refused, c.noTime, c.notBuffered, c.fallbackAnswered} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *RetryCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.retries, c.s.Retries.Load())
	counter(c.refused, c.s.RetriesRefused.Load())
	counter(c.noTime, c.s.RetriesNoTime.Load())
	for i, reason := range httpproxy.NotBufferedReasons {
		counter(c.notBuffered, c.s.BodyNotBuffered[i].Load(), reason)
	}
	for prio := 1; prio < len(c.s.FallbackAnswered); prio++ {
		counter(c.fallbackAnswered, c.s.FallbackAnswered[prio].Load(), strconv.Itoa(prio))
	}
}
