package dns

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Status is the proxy's part of /config_dump. It says what the proxy does; it
// has no say in readiness (a sidecar without DNS routes all the same).
type Status struct {
	Addrs      []string `json:"addrs"`
	Namespace  string   `json:"namespace"`
	ResolvConf string   `json:"resolvConf,omitempty"`
	Upstreams  []string `json:"upstreams"`
	// Domain and Hosts are the active configuration's name table ("" and 0:
	// none, so every name is forwarded).
	Domain   string `json:"domain,omitempty"`
	Hosts    int    `json:"hosts"`
	InFlight int64  `json:"inFlight"`
	TCPConns int64  `json:"tcpConnections"`
	Limits   Limits `json:"limits"`
	// Queries by outcome (both transports); TCPRefused counts connections
	// closed at accept past MaxTCPConns.
	Queries    map[string]uint64 `json:"queries"`
	TCPRefused uint64            `json:"tcpConnectionsRefused"`
}

// Limits are the proxy's bounds as configured.
type Limits struct {
	MaxInFlight    int    `json:"maxInFlight"`
	ForwardTimeout string `json:"forwardTimeout"`
	MaxTCPConns    int    `json:"maxTCPConnections"`
	TCPIdleTimeout string `json:"tcpIdleTimeout"`
	MaxUDPSize     int    `json:"maxUDPSize"`
}

// Status reads the counters and the active table.
func (s *Server) Status() *Status {
	st := &Status{Namespace: s.cfg.Namespace, ResolvConf: s.cfg.ResolvConf, Upstreams: append([]string{}, s.cfg.Upstreams...),
		InFlight: s.inFlight.Load(), TCPConns: s.tcpConns.Load(), TCPRefused: s.tcpRefused.Load(),
		Limits: Limits{MaxInFlight: s.cfg.MaxInFlight, ForwardTimeout: s.cfg.ForwardTimeout.String(), MaxTCPConns: s.cfg.MaxTCPConns,
			TCPIdleTimeout: s.cfg.TCPIdleTimeout.String(), MaxUDPSize: MaxUDPSize},
		Queries: make(map[string]uint64, numOutcomes)}
	s.mu.Lock()
	st.Addrs = append([]string{}, s.addrs...)
	s.mu.Unlock()
	t := s.cfg.Snapshot.Load().DNS()
	st.Domain, st.Hosts = t.Domain(), t.Len()
	for o := range numOutcomes {
		st.Queries[o.String()] = s.queries[o][0].Load() + s.queries[o][1].Load()
	}
	return st
}

var (
	queriesDesc = prometheus.NewDesc("weft_dns_queries_total",
		"DNS queries by outcome (mesh, nxdomain, forwarded, refused, upstream_error, invalid) and transport.", []string{"outcome", "transport"}, nil)
	inFlightDesc   = prometheus.NewDesc("weft_dns_queries_in_flight", "DNS queries being answered now.", nil, nil)
	tcpConnsDesc   = prometheus.NewDesc("weft_dns_tcp_connections", "Open client TCP connections of the DNS proxy.", nil, nil)
	tcpRefusedDesc = prometheus.NewDesc("weft_dns_tcp_connections_refused_total", "Client TCP connections closed at accept past the bound.", nil, nil)
	hostsDesc      = prometheus.NewDesc("weft_dns_hosts", "Mesh names in the active configuration's DNS table.", nil, nil)
	limitDesc      = prometheus.NewDesc("weft_dns_limit", "The DNS proxy's bounds.", []string{"limit"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queriesDesc, inFlightDesc, tcpConnsDesc, tcpRefusedDesc, hostsDesc, limitDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the atomic counters as they are.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	for o := range numOutcomes {
		for t, tn := range [2]string{"udp", "tcp"} {
			ch <- prometheus.MustNewConstMetric(queriesDesc, prometheus.CounterValue, float64(s.queries[o][t].Load()), o.String(), tn)
		}
	}
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(s.inFlight.Load()))
	ch <- prometheus.MustNewConstMetric(tcpConnsDesc, prometheus.GaugeValue, float64(s.tcpConns.Load()))
	ch <- prometheus.MustNewConstMetric(tcpRefusedDesc, prometheus.CounterValue, float64(s.tcpRefused.Load()))
	ch <- prometheus.MustNewConstMetric(hostsDesc, prometheus.GaugeValue, float64(s.cfg.Snapshot.Load().DNS().Len()))
	for name, v := range map[string]float64{
		"max_in_flight": float64(s.cfg.MaxInFlight), "forward_timeout_seconds": s.cfg.ForwardTimeout.Seconds(),
		"max_tcp_connections": float64(s.cfg.MaxTCPConns), "tcp_idle_timeout_seconds": s.cfg.TCPIdleTimeout.Seconds(),
		"max_udp_size_bytes": MaxUDPSize,
	} {
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, v, name)
	}
}
