package admin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
)

// RateLimitCollector exports every local rate limit of the sidecar, per service
// key (the key in x-weft-ratelimited): its configuration and what it allowed,
// rejected and, in dry-run mode, would have rejected. It reads the registry's
// long-lived limiters (atomics), so a scrape never blocks the request path; a
// service key no configuration uses any more is retired with its counters.
type RateLimitCollector struct {
	reg *cluster.Registry

	allowed, rejected, dryRun *prometheus.Desc
	rps, burst, dryRunOn      *prometheus.Desc
}

// NewRateLimitCollector reads reg, the registry the sidecar compiles into.
func NewRateLimitCollector(reg *cluster.Registry) (*RateLimitCollector, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: rate limit collector: registry is nil", ErrConfig)
	}
	l := []string{"service"}
	return &RateLimitCollector{reg: reg,
		allowed:  prometheus.NewDesc("weft_sidecar_ratelimit_allowed_total", "Requests (TCP: connections) a local rate limit let through with a token, by service key.", l, nil),
		rejected: prometheus.NewDesc("weft_sidecar_ratelimit_rejected_total", "Requests answered 429 (x-weft-local: ratelimit; TCP: connections closed) by a local rate limit, by service key.", l, nil),
		dryRun:   prometheus.NewDesc("weft_sidecar_ratelimit_dry_run_rejected_total", "Requests a dry-run local rate limit would have rejected and let through, by service key.", l, nil),
		rps:      prometheus.NewDesc("weft_sidecar_ratelimit_requests_per_second", "The local rate limit's refill rate (localRateLimit.requestsPerSecond), by service key.", l, nil),
		burst:    prometheus.NewDesc("weft_sidecar_ratelimit_burst", "The local rate limit's bucket size (localRateLimit.burst, defaulted), by service key.", l, nil),
		dryRunOn: prometheus.NewDesc("weft_sidecar_ratelimit_dry_run", "1 when the local rate limit only counts (localRateLimit.dryRun), by service key.", l, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *RateLimitCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.allowed, c.rejected, c.dryRun, c.rps, c.burst, c.dryRunOn} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A service key appears once it has a
// limit configured, and stays (with its counters) while a configuration uses
// the key, also after its limit is removed.
func (c *RateLimitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.reg.All() {
		l := s.Limiter
		st := l.Stats()
		if !l.Enabled() && st == (ratelimit.Stats{}) {
			continue
		}
		cfg := l.Config()
		ch <- prometheus.MustNewConstMetric(c.allowed, prometheus.CounterValue, float64(st.Allowed), s.Key)
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(st.Rejected), s.Key)
		ch <- prometheus.MustNewConstMetric(c.dryRun, prometheus.CounterValue, float64(st.DryRunRejected), s.Key)
		ch <- prometheus.MustNewConstMetric(c.rps, prometheus.GaugeValue, cfg.RequestsPerSecond, s.Key)
		ch <- prometheus.MustNewConstMetric(c.burst, prometheus.GaugeValue, float64(cfg.Burst), s.Key)
		on := 0.0
		if cfg.DryRun {
			on = 1
		}
		ch <- prometheus.MustNewConstMetric(c.dryRunOn, prometheus.GaugeValue, on, s.Key)
	}
}
