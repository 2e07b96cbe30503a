package admin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

// BreakerCollector exports every Service's circuit breaker from the cluster
// Registry at scrape time: overflows by limit, what is in use and the limits in
// force. The request path pays nothing for it (the counts are the breaker's own
// atomics); a scrape takes the registry's lock only to list its entries.
type BreakerCollector struct {
	reg                   *cluster.Registry
	overflows, inUse, max *prometheus.Desc
}

// inUseLimits pairs each counted resource with the limit that bounds it.
var inUseLimits = [...]struct {
	r circuitbreak.Resource
	l circuitbreak.Limit
}{
	{circuitbreak.Connections, circuitbreak.MaxConnections},
	{circuitbreak.Pending, circuitbreak.MaxPendingRequests},
	{circuitbreak.Requests, circuitbreak.MaxRequests},
	{circuitbreak.Retries, circuitbreak.MaxRetries},
}

// NewBreakerCollector exports reg's breakers.
func NewBreakerCollector(reg *cluster.Registry) (*BreakerCollector, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: BreakerCollector: nil Registry", ErrConfig)
	}
	l := []string{"service", "limit"}
	return &BreakerCollector{reg: reg,
		overflows: prometheus.NewDesc("weft_sidecar_breaker_overflows_total",
			"Requests (or TCP streams) refused by a circuit-breaker limit, by service key and limit (the x-weft-overflow value: maxConnections, maxPendingRequests, maxRequests; maxRetries and retryBudget refuse a retry, not the request).", l, nil),
		inUse: prometheus.NewDesc("weft_sidecar_breaker_in_use",
			"What a circuit-breaker limit counts now, by service key and limit: connections, pending requests, requests, retries in flight.", l, nil),
		max: prometheus.NewDesc("weft_sidecar_breaker_limit",
			"The circuit-breaker limits in force, by service key and limit; maxRetries is the smaller of max retries and the retry budget's current allowance.", l, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *BreakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.overflows
	ch <- c.inUse
	ch <- c.max
}

// Collect implements prometheus.Collector.
func (c *BreakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.reg.All() {
		b := s.Breaker
		for l := range circuitbreak.NumLimits {
			ch <- prometheus.MustNewConstMetric(c.overflows, prometheus.CounterValue, float64(b.Overflows(l)), s.Key, l.String())
		}
		for _, p := range inUseLimits {
			ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(b.InUse(p.r)), s.Key, p.l.String())
			ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(b.Max(p.r)), s.Key, p.l.String())
		}
	}
}
