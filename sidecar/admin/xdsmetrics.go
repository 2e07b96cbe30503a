package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/xdsclient"
)

// XDSCollector exports the xDS client's status as Prometheus series, read from its
// immutable Status at scrape time (the stream goroutine is never touched).
type XDSCollector struct {
	status    func() *xdsclient.Status
	acks      *prometheus.Desc
	nacks     *prometheus.Desc
	ignored   *prometheus.Desc
	resources *prometheus.Desc
	connected *prometheus.Desc
	unknown   *prometheus.Desc
}

// NewXDSCollector returns a collector over status (nil status: nothing exported).
func NewXDSCollector(status func() *xdsclient.Status) *XDSCollector {
	return &XDSCollector{
		status:    status,
		acks:      prometheus.NewDesc("weft_sidecar_xds_acks_total", "Responses ACKed, by type.", []string{"type"}, nil),
		nacks:     prometheus.NewDesc("weft_sidecar_xds_nacks_total", "Responses NACKed, by type.", []string{"type"}, nil),
		ignored:   prometheus.NewDesc("weft_sidecar_xds_ignored_total", "Responses ignored (empty or repeated nonce), by type.", []string{"type"}, nil),
		resources: prometheus.NewDesc("weft_sidecar_xds_resources", "Resources held, by type.", []string{"type"}, nil),
		connected: prometheus.NewDesc("weft_sidecar_xds_connected", "1 while an ADS stream is up.", nil, nil),
		unknown:   prometheus.NewDesc("weft_sidecar_xds_unknown_type_responses_total", "Responses for types not subscribed (ignored).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *XDSCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acks, c.nacks, c.ignored, c.resources, c.connected, c.unknown} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *XDSCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	if s == nil {
		return
	}
	connected := 0.0
	if s.Connected {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, connected)
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.CounterValue, float64(s.UnknownTypeResponses))
	for _, t := range s.Types {
		name := xdsclient.ShortName(t.TypeURL)
		ch <- prometheus.MustNewConstMetric(c.acks, prometheus.CounterValue, float64(t.ACKs), name)
		ch <- prometheus.MustNewConstMetric(c.nacks, prometheus.CounterValue, float64(t.NACKs), name)
		ch <- prometheus.MustNewConstMetric(c.ignored, prometheus.CounterValue, float64(t.Ignored), name)
		ch <- prometheus.MustNewConstMetric(c.resources, prometheus.GaugeValue, float64(t.Resources), name)
	}
}
