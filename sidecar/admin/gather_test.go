package admin

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gather registers c alone on a pedantic registry (which checks descriptions and
// label consistency) and flattens what it reports to "name{label=value...}" → value
// (counter plus gauge): the one reader every collector test here uses.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(c)
	mfs, err := pr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return got
}
