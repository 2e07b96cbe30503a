package status

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	pushes      *prometheus.CounterVec
	pushBytes   *prometheus.CounterVec
	nacks       *prometheus.CounterVec
	convergence prometheus.Histogram
	connected   prometheus.Gauge

	outlierReports *prometheus.CounterVec
	outlierEntries prometheus.Gauge

	mu     sync.Mutex              // guards byType
	byType map[string]*typeMetrics // TypeName -> its counters
}

// typeMetrics are one type's counters, curried once: a push then costs two
// atomic adds, not two label lookups.
type typeMetrics struct {
	pushes, pushBytes prometheus.Counter
}

// forType returns typ's counters (by TypeName, so unknown types share "other").
func (m *metrics) forType(typ string) *typeMetrics {
	name := TypeName(typ)
	m.mu.Lock()
	defer m.mu.Unlock()
	tm, ok := m.byType[name]
	if !ok {
		tm = &typeMetrics{pushes: m.pushes.WithLabelValues(name), pushBytes: m.pushBytes.WithLabelValues(name)}
		m.byType[name] = tm
	}
	return tm
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		byType: map[string]*typeMetrics{},
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_pilot_xds_pushes_total", Help: "xDS responses sent, by type.",
		}, []string{"type"}),
		pushBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_pilot_xds_push_bytes_total", Help: "Bytes of xDS responses sent, by type.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_pilot_xds_nacks_total", Help: "xDS responses rejected by proxies, by type.",
		}, []string{"type"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "weft_pilot_xds_convergence_seconds",
			Help:    "Time from a store write to a proxy acknowledging a snapshot that includes it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms .. ~41s
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_pilot_xds_connected_proxies", Help: "ADS streams open now.",
		}),
		outlierReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_pilot_outlier_reports_total",
			Help: "Outlier ejection reports from proxies, by result (accepted, invalid, unknown_node, rate_limited, full, busy).",
		}, []string{"result"}),
		outlierEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_pilot_outlier_entries", Help: "Ejection entries held from live outlier reports.",
		}),
	}
	for _, c := range []prometheus.Collector{m.pushes, m.pushBytes, m.nacks, m.convergence, m.connected, m.outlierReports, m.outlierEntries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("status: register metrics: %w", err)
		}
	}
	return m, nil
}
