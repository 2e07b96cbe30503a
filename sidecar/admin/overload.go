package admin

import (
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/sidecar/overload"
)

// OverloadConfig is what the overload collector reads: every source is atomics,
// so a scrape never blocks the request path.
type OverloadConfig struct {
	// Listeners report their connections, requests and refusals.
	Listeners []*listener.Server
	// Connections is the sidecar-wide connection bound; nil: none.
	Connections *overload.Limit
	// Memory is the memory guard; nil: none.
	Memory *overload.Memory
	// Limits are the fixed bounds, exported as weft_sidecar_limit{limit=name}
	// (sizes in bytes, timeouts in seconds).
	Limits map[string]float64
}

// OverloadCollector exports the sidecar's own overload bounds, their current use,
// and what they refused.
type OverloadCollector struct {
	cfg OverloadConfig

	conns, connsLimit, connsRefused                          *prometheus.Desc
	sidecarConns, sidecarConnsLimit                          *prometheus.Desc
	reqs, reqsLimit, reqsRefused                             *prometheus.Desc
	memUsed, memCommitted, memLimit, memHigh, memShed, memOn *prometheus.Desc
	limit                                                    *prometheus.Desc
}

// NewOverloadCollector checks cfg.
func NewOverloadCollector(cfg OverloadConfig) (*OverloadCollector, error) {
	for i, l := range cfg.Listeners {
		if l == nil {
			return nil, fmt.Errorf("%w: OverloadConfig.Listeners[%d] is nil", ErrConfig, i)
		}
	}
	l := []string{"listener"}
	return &OverloadCollector{cfg: cfg,
		conns:             prometheus.NewDesc("weft_sidecar_downstream_connections", "Open downstream (client) connections, HTTP/1.1, HTTP/2 and TCP, by listener.", l, nil),
		connsLimit:        prometheus.NewDesc("weft_sidecar_downstream_connections_limit", "The listener's downstream connection bound (--max-connections-per-listener).", l, nil),
		connsRefused:      prometheus.NewDesc("weft_sidecar_downstream_connections_refused_total", "Downstream connections closed at accept because a bound was reached, by listener and bound.", []string{"listener", "reason"}, nil),
		sidecarConns:      prometheus.NewDesc("weft_sidecar_downstream_connections_sidecar", "Open downstream connections across all listeners.", nil, nil),
		sidecarConnsLimit: prometheus.NewDesc("weft_sidecar_downstream_connections_sidecar_limit", "The sidecar-wide downstream connection bound (--max-connections).", nil, nil),
		reqs:              prometheus.NewDesc("weft_sidecar_downstream_requests_active", "HTTP/1.1 requests and HTTP/2 streams in flight, by listener.", l, nil),
		reqsLimit:         prometheus.NewDesc("weft_sidecar_downstream_requests_limit", "The listener's bound on requests in flight (--max-requests-per-listener).", l, nil),
		reqsRefused:       prometheus.NewDesc("weft_sidecar_downstream_requests_refused_total", "Requests answered 503 (x-weft-overflow: requests) because the listener's request bound was reached.", l, nil),
		memUsed:           prometheus.NewDesc("weft_sidecar_memory_used_bytes", "Memory the Go runtime holds from the OS, as last sampled (what the soft limit counts).", nil, nil),
		memCommitted:      prometheus.NewDesc("weft_sidecar_memory_committed_bytes", "Request-body bytes the HTTP/2 server holds unread or has granted clients credit to send; shedding counts them on top of the sampled memory.", nil, nil),
		memLimit:          prometheus.NewDesc("weft_sidecar_memory_limit_bytes", "The memory ceiling (--memory-limit), also the Go soft limit.", nil, nil),
		memHigh:           prometheus.NewDesc("weft_sidecar_memory_high_water_bytes", "Memory at and above which new requests are shed (--memory-high-water of the limit).", nil, nil),
		memShed:           prometheus.NewDesc("weft_sidecar_memory_shed_requests_total", "Requests answered 503 (x-weft-overflow: memory) above the memory high-water mark.", nil, nil),
		memOn:             prometheus.NewDesc("weft_sidecar_memory_shedding", "1 while new requests are being shed for memory.", nil, nil),
		limit:             prometheus.NewDesc("weft_sidecar_limit", "Fixed overload bounds by name (sizes in bytes, timeouts in seconds; a timeout of 0 is none).", []string{"limit"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *OverloadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.connsLimit, c.connsRefused, c.sidecarConns, c.sidecarConnsLimit,
		c.reqs, c.reqsLimit, c.reqsRefused, c.memUsed, c.memCommitted, c.memLimit, c.memHigh, c.memShed, c.memOn, c.limit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *OverloadCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	for _, l := range c.cfg.Listeners {
		st := l.Stats()
		gauge(c.conns, float64(st.Connections), st.Name)
		gauge(c.connsLimit, float64(st.MaxConnections), st.Name)
		counter(c.connsRefused, st.RefusedListener, st.Name, listener.RefusedListener)
		counter(c.connsRefused, st.RefusedSidecar, st.Name, listener.RefusedSidecar)
		gauge(c.reqs, float64(st.Requests), st.Name)
		gauge(c.reqsLimit, float64(st.MaxRequests), st.Name)
		counter(c.reqsRefused, st.RequestsOverflowed, st.Name)
	}
	if l := c.cfg.Connections; l != nil {
		gauge(c.sidecarConns, float64(l.Current()))
		gauge(c.sidecarConnsLimit, float64(l.Max()))
	}
	if m := c.cfg.Memory; m != nil {
		gauge(c.memUsed, float64(m.Used()))
		gauge(c.memCommitted, float64(m.Committed()))
		gauge(c.memLimit, float64(m.Limit()))
		gauge(c.memHigh, float64(m.HighWater()))
		counter(c.memShed, m.Sheds())
		on := 0.0
		if m.Shedding() {
			on = 1
		}
		gauge(c.memOn, on)
	}
	names := make([]string, 0, len(c.cfg.Limits))
	for n := range c.cfg.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		gauge(c.limit, c.cfg.Limits[n], n)
	}
}
