package admin

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of RequestMetrics that are not cluster names.
const (
	// LocalCluster labels answers the proxy gave before any cluster was picked
	// (no route, direct response, degraded, malformed request).
	LocalCluster = "none"
	// OtherCluster labels clusters beyond RequestMetrics' cluster limit.
	OtherCluster = "other"
	// OtherCode labels status codes outside 100..599; code "0" means the client
	// went away before any status was sent.
	OtherCode = "other"
)

// MaxClusterLimit bounds RequestMetricsConfig.MaxClusters.
const MaxClusterLimit = 1 << 14

// durationBuckets are the request duration histogram's upper bounds, in seconds.
var durationBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// RequestMetricsConfig configures RequestMetrics.
type RequestMetricsConfig struct {
	// MaxClusters caps the distinct cluster label values (label cardinality):
	// the first MaxClusters cluster names seen get their own series, later ones
	// are counted under OtherCluster. Series are kept for clusters that leave the
	// configuration, so counters stay monotonic. 1..MaxClusterLimit; 0 means 256.
	MaxClusters int
}

// RequestMetrics counts requests and TCP connections per cluster. It implements
// httpproxy.Observer and tcpproxy.Observer and is a prometheus.Collector.
//
// Recording is one lookup in an immutable map (swapped atomically when a new
// cluster name appears) and atomic adds: no allocation, no lock, no string
// building per request. Labels are built only at scrape time, from the atomics.
type RequestMetrics struct {
	max      int
	byName   atomic.Pointer[map[string]*clusterStats]
	mu       sync.Mutex // serialises adding clusters
	order    []*clusterStats
	local    *clusterStats
	other    *clusterStats
	requests *prometheus.Desc
	duration *prometheus.Desc
	conns    *prometheus.Desc
	bytesIn  *prometheus.Desc
	bytesOut *prometheus.Desc
}

// clusterStats are one cluster's counters.
type clusterStats struct {
	name string
	// byClass[c-1] counts codes c00..c99, allocated the first time a code of the
	// class is seen (most clusters only ever answer 2xx).
	byClass  [5]atomic.Pointer[[100]atomic.Uint64]
	noCode   atomic.Uint64
	badCode  atomic.Uint64
	buckets  [len(durationBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; last is +Inf
	sumNanos atomic.Int64
	conns    atomic.Uint64
	bytesIn  atomic.Uint64
	bytesOut atomic.Uint64
}

// NewRequestMetrics checks cfg and returns empty metrics.
func NewRequestMetrics(cfg RequestMetricsConfig) (*RequestMetrics, error) {
	if cfg.MaxClusters == 0 {
		cfg.MaxClusters = 256
	}
	if cfg.MaxClusters < 1 || cfg.MaxClusters > MaxClusterLimit {
		return nil, fmt.Errorf("%w: RequestMetricsConfig.MaxClusters %d outside 1..%d", ErrConfig, cfg.MaxClusters, MaxClusterLimit)
	}
	m := &RequestMetrics{
		max:      cfg.MaxClusters,
		local:    &clusterStats{name: LocalCluster},
		other:    &clusterStats{name: OtherCluster},
		requests: prometheus.NewDesc("weft_sidecar_requests_total", "HTTP requests answered, by cluster and exact status code.", []string{"cluster", "code"}, nil),
		duration: prometheus.NewDesc("weft_sidecar_request_duration_seconds", "HTTP request duration, request head to end of response, by cluster.", []string{"cluster"}, nil),
		conns:    prometheus.NewDesc("weft_sidecar_tcp_connections_total", "TCP proxy connections finished, by cluster.", []string{"cluster"}, nil),
		bytesIn:  prometheus.NewDesc("weft_sidecar_tcp_received_bytes_total", "Bytes received from downstream clients on TCP proxy connections, by cluster.", []string{"cluster"}, nil),
		bytesOut: prometheus.NewDesc("weft_sidecar_tcp_sent_bytes_total", "Bytes sent to downstream clients on TCP proxy connections, by cluster.", []string{"cluster"}, nil),
	}
	empty := map[string]*clusterStats{}
	m.byName.Store(&empty)
	return m, nil
}

// stats returns the counters of cluster name, adding them on first sight.
func (m *RequestMetrics) stats(name string) *clusterStats {
	if name == "" {
		return m.local
	}
	if s, ok := (*m.byName.Load())[name]; ok {
		return s
	}
	return m.add(name)
}

// add is the slow path of stats: copy-on-write of the name map, at most MaxClusters times.
func (m *RequestMetrics) add(name string) *clusterStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.byName.Load()
	if s, ok := cur[name]; ok {
		return s
	}
	if len(cur) >= m.max {
		return m.other
	}
	next := make(map[string]*clusterStats, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	s := &clusterStats{name: name}
	next[name] = s
	m.order = append(m.order, s)
	m.byName.Store(&next)
	return s
}

// Request records one answered HTTP request (httpproxy.Observer).
func (m *RequestMetrics) Request(cluster string, code int, dur time.Duration) {
	s := m.stats(cluster)
	switch {
	case code >= 100 && code <= 599:
		cls := &s.byClass[code/100-1]
		p := cls.Load()
		if p == nil {
			cls.CompareAndSwap(nil, new([100]atomic.Uint64))
			p = cls.Load()
		}
		p[code%100].Add(1)
	case code == 0:
		s.noCode.Add(1)
	default:
		s.badCode.Add(1)
	}
	sec := dur.Seconds()
	i := 0
	for i < len(durationBuckets) && sec > durationBuckets[i] {
		i++
	}
	s.buckets[i].Add(1)
	s.sumNanos.Add(int64(dur))
}

// TCPConn records one finished TCP proxy connection (tcpproxy.Observer): bytesIn
// came from the downstream client, bytesOut went to it.
func (m *RequestMetrics) TCPConn(cluster string, bytesIn, bytesOut int64) {
	s := m.stats(cluster)
	s.conns.Add(1)
	s.bytesIn.Add(uint64(max(bytesIn, 0)))
	s.bytesOut.Add(uint64(max(bytesOut, 0)))
}

// Describe implements prometheus.Collector.
func (m *RequestMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.requests, m.duration, m.conns, m.bytesIn, m.bytesOut} {
		ch <- d
	}
}

// all lists every cluster's counters: named ones in order of first sight, then
// the local and overflow buckets.
func (m *RequestMetrics) all() []*clusterStats {
	m.mu.Lock()
	out := make([]*clusterStats, 0, len(m.order)+2)
	out = append(out, m.order...)
	m.mu.Unlock()
	return append(out, m.local, m.other)
}

// Collect implements prometheus.Collector: series are built from the atomics at
// scrape time; clusters with no traffic of a kind export no series of it.
func (m *RequestMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.all() {
		var total uint64
		for c := range s.byClass {
			p := s.byClass[c].Load()
			if p == nil {
				continue
			}
			for i := range p {
				if n := p[i].Load(); n > 0 {
					total += n
					ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(n), s.name, strconv.Itoa((c+1)*100+i))
				}
			}
		}
		if n := s.noCode.Load(); n > 0 {
			total += n
			ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(n), s.name, "0")
		}
		if n := s.badCode.Load(); n > 0 {
			total += n
			ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(n), s.name, OtherCode)
		}
		if total > 0 {
			// Buckets are read one by one while requests land: the count is their
			// sum so the histogram is always self-consistent.
			cum := make(map[float64]uint64, len(durationBuckets))
			var count uint64
			for i, ub := range durationBuckets {
				count += s.buckets[i].Load()
				cum[ub] = count
			}
			count += s.buckets[len(durationBuckets)].Load()
			sum := time.Duration(s.sumNanos.Load()).Seconds()
			ch <- prometheus.MustNewConstHistogram(m.duration, count, sum, cum, s.name)
		}
		if n := s.conns.Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(m.conns, prometheus.CounterValue, float64(n), s.name)
			ch <- prometheus.MustNewConstMetric(m.bytesIn, prometheus.CounterValue, float64(s.bytesIn.Load()), s.name)
			ch <- prometheus.MustNewConstMetric(m.bytesOut, prometheus.CounterValue, float64(s.bytesOut.Load()), s.name)
		}
	}
}

// statsLines adds Envoy-style /stats lines: cluster.<name>.rq_<code>, rq_total,
// tcp_cx_total, tcp_rx_bytes, tcp_tx_bytes (series with no traffic are left out).
func (m *RequestMetrics) statsLines(lines map[string]string) {
	for _, s := range m.all() {
		p := "cluster." + s.name + "."
		var total uint64
		add := func(code string, n uint64) {
			if n > 0 {
				total += n
				lines[p+"rq_"+code] = strconv.FormatUint(n, 10)
			}
		}
		for c := range s.byClass {
			if cls := s.byClass[c].Load(); cls != nil {
				for i := range cls {
					add(strconv.Itoa((c+1)*100+i), cls[i].Load())
				}
			}
		}
		add("0", s.noCode.Load())
		add(OtherCode, s.badCode.Load())
		if total > 0 {
			lines[p+"rq_total"] = strconv.FormatUint(total, 10)
		}
		if n := s.conns.Load(); n > 0 {
			lines[p+"tcp_cx_total"] = strconv.FormatUint(n, 10)
			lines[p+"tcp_rx_bytes"] = strconv.FormatUint(s.bytesIn.Load(), 10)
			lines[p+"tcp_tx_bytes"] = strconv.FormatUint(s.bytesOut.Load(), 10)
		}
	}
}
