package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/pilot/store"
)

type metrics struct {
	requests      *prometheus.CounterVec
	applyDuration *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry, st store.Store) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_pilot_admin_requests_total",
			Help: "Admin API requests by method and HTTP status code.",
		}, []string{"method", "code"}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weft_pilot_apply_duration_seconds",
			Help:    "Time to validate and commit a write (PUT, DELETE, bulk apply), by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"outcome"}),
	}
	// Read at scrape time so the gauge cannot drift from the store.
	revision := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weft_pilot_store_revision",
		Help: "Current store revision.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rev, err := st.Revision(ctx)
		if err != nil {
			return -1
		}
		return float64(rev)
	})
	for _, c := range []prometheus.Collector{m.requests, m.applyDuration, revision} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
