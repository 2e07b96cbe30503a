package admin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/cluster"
)

// PassthroughCollector exports what original-destination (passthrough) and
// black-hole clusters did: weft_passthrough_total{result} with result
// "forwarded" or a refusal reason (cluster.RefusedLoop, RefusedBlackHole,
// RefusedNoDestination). Atomics only: a scrape never blocks the request path.
type PassthroughCollector struct {
	p     *cluster.Passthrough
	total *prometheus.Desc
}

// NewPassthroughCollector exports p.
func NewPassthroughCollector(p *cluster.Passthrough) (*PassthroughCollector, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil Passthrough", ErrConfig)
	}
	return &PassthroughCollector{p: p, total: prometheus.NewDesc("weft_passthrough_total",
		"Connections and requests to ORIGINAL_DST (passthrough) and black-hole clusters: forwarded to their original destination, or refused (loop: the destination is the sidecar's own listener; blackhole: outbound traffic policy REGISTRY_ONLY; no_destination: none known).",
		[]string{"result"}, nil)}, nil
}

// Describe implements prometheus.Collector.
func (c *PassthroughCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.total }

// Collect implements prometheus.Collector.
func (c *PassthroughCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	for _, v := range []struct {
		n      uint64
		result string
	}{{s.Forwarded, "forwarded"}, {s.Loops, cluster.RefusedLoop}, {s.BlackHoled, cluster.RefusedBlackHole}, {s.NoDest, cluster.RefusedNoDestination}} {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(v.n), v.result)
	}
}
