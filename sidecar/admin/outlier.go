package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// OutlierCollector exports outlier detection from the cluster Registry at scrape
// time: verdicts by detector (over the sidecar's life), hosts ejected now per
// service key, and which clusters are in panic mode. The request path pays nothing
// for it; a scrape takes each detector's lock once.
type OutlierCollector struct {
	reg      *cluster.Registry
	clusters func() []*cluster.Cluster
	detected, ejections, notEnforced, overflow, returns, panicPicks,
	ejected, hosts, panic *prometheus.Desc
}

// NewOutlierCollector exports reg's detectors; clusters lists the active
// configuration's clusters (nil: none, e.g. before the first activation).
func NewOutlierCollector(reg *cluster.Registry, clusters func() []*cluster.Cluster) (*OutlierCollector, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: OutlierCollector: nil Registry", ErrConfig)
	}
	if clusters == nil {
		clusters = func() []*cluster.Cluster { return nil }
	}
	d := []string{"detector"}
	s := []string{"service"}
	return &OutlierCollector{reg: reg, clusters: clusters,
		detected: prometheus.NewDesc("weft_sidecar_outlier_detected_total",
			"Outliers found, by detector (the API's field name), whether ejected or not.", d, nil),
		ejections: prometheus.NewDesc("weft_sidecar_outlier_ejections_total",
			"Hosts ejected, by the detector that ejected them.", d, nil),
		notEnforced: prometheus.NewDesc("weft_sidecar_outlier_not_enforced_total",
			"Outliers left in service because the detector's enforcing percent said no.", d, nil),
		overflow: prometheus.NewDesc("weft_sidecar_outlier_overflow_total",
			"Outliers left in service because maxEjectionPercent of their service's hosts were already ejected.", d, nil),
		returns: prometheus.NewDesc("weft_sidecar_outlier_returns_total",
			"Ejected hosts returned to service (time served, detection off, host removed, or cap lowered).", nil, nil),
		panicPicks: prometheus.NewDesc("weft_sidecar_outlier_panic_picks_total",
			"Picks that ignored an ejection because their cluster was in panic mode.", nil, nil),
		ejected: prometheus.NewDesc("weft_sidecar_outlier_ejected_hosts",
			"Hosts ejected now, by service key (services with outlier detection).", s, nil),
		hosts: prometheus.NewDesc("weft_sidecar_outlier_hosts",
			"Hosts the detector judges, by service key (services with outlier detection).", s, nil),
		panic: prometheus.NewDesc("weft_sidecar_outlier_panic",
			"1 when the cluster is in panic mode: its usable hosts (healthy, not ejected) are below minHealthPercent, so ejections are ignored (clusters with outlier detection).",
			[]string{"cluster"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *OutlierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.detected, c.ejections, c.notEnforced, c.overflow, c.returns, c.panicPicks, c.ejected, c.hosts, c.panic} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *OutlierCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.reg.OutlierTotals()
	for _, k := range outlier.Kinds() {
		s := t.ByKind[k]
		ch <- prometheus.MustNewConstMetric(c.detected, prometheus.CounterValue, float64(s.Detected), k.String())
		ch <- prometheus.MustNewConstMetric(c.ejections, prometheus.CounterValue, float64(s.Ejected), k.String())
		ch <- prometheus.MustNewConstMetric(c.notEnforced, prometheus.CounterValue, float64(s.NotEnforced), k.String())
		ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(s.Overflow), k.String())
	}
	ch <- prometheus.MustNewConstMetric(c.returns, prometheus.CounterValue, float64(t.Returns))
	ch <- prometheus.MustNewConstMetric(c.panicPicks, prometheus.CounterValue, float64(t.PanicPicks))
	for _, s := range c.reg.All() {
		if s.Outlier.Config() == nil {
			continue
		}
		n, m := s.Outlier.Ejected()
		ch <- prometheus.MustNewConstMetric(c.ejected, prometheus.GaugeValue, float64(n), s.Key)
		ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, float64(m), s.Key)
	}
	for _, cl := range c.clusters() {
		if cl.Shared.Outlier.Config() == nil {
			continue
		}
		v := 0.0
		if cl.Panic() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.panic, prometheus.GaugeValue, v, cl.Name)
	}
}

// Outliers is the /outliers document: what is ejected now and the recent events.
type Outliers struct {
	Ejections []OutlierEjection `json:"ejections"`
	Recent    []OutlierEvent    `json:"recent"` // oldest first
}

// OutlierEjection is one ejected host.
type OutlierEjection struct {
	Service    string          `json:"service"`
	Host       string          `json:"host"`
	Detector   string          `json:"detector"`
	Why        string          `json:"why"` // the numbers, in words
	Numbers    outlier.Numbers `json:"numbers"`
	Since      time.Time       `json:"since"`
	Until      time.Time       `json:"until"`
	Duration   string          `json:"duration"`
	Remaining  string          `json:"remaining"`
	Multiplier uint32          `json:"multiplier"`
	Ejections  uint64          `json:"ejections"` // ever, for this host
}

// OutlierEvent is one ejection or return.
type OutlierEvent struct {
	At         time.Time       `json:"at"`
	Action     string          `json:"action"` // eject | return
	Service    string          `json:"service"`
	Host       string          `json:"host"`
	Detector   string          `json:"detector"`
	Why        string          `json:"why"`
	Numbers    outlier.Numbers `json:"numbers"`
	Duration   string          `json:"duration"` // eject: the ejection time; return: how long it was out
	Multiplier uint32          `json:"multiplier"`
	Reason     string          `json:"reason,omitempty"` // return: why before its time
}

// OutliersView builds the /outliers document at now.
func OutliersView(reg *cluster.Registry, now time.Time) Outliers {
	doc := Outliers{Ejections: []OutlierEjection{}, Recent: []OutlierEvent{}}
	for _, e := range reg.Ejections() {
		doc.Ejections = append(doc.Ejections, OutlierEjection{Service: e.Service, Host: e.Host, Detector: e.Detector.String(),
			Why: e.Numbers.Describe(e.Detector), Numbers: e.Numbers, Since: e.Since, Until: e.Until, Duration: e.Duration.String(),
			Remaining: max(e.Until.Sub(now), 0).Round(time.Millisecond).String(), Multiplier: e.Multiplier, Ejections: e.Ejections})
	}
	for _, e := range reg.OutlierEvents().Recent() {
		doc.Recent = append(doc.Recent, OutlierEvent{At: e.At, Action: e.Action.String(), Service: e.Service, Host: e.Host,
			Detector: e.Detector.String(), Why: e.Numbers.Describe(e.Detector), Numbers: e.Numbers, Duration: e.Duration.String(),
			Multiplier: e.Multiplier, Reason: e.Reason})
	}
	return doc
}

func (a *Admin) outliers(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if a.cfg.Outliers == nil {
		_ = json.NewEncoder(w).Encode(Outliers{Ejections: []OutlierEjection{}, Recent: []OutlierEvent{}})
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(OutliersView(a.cfg.Outliers, a.cfg.Now()))
}
