package mode

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	modeDesc = prometheus.NewDesc("weft_interception_mode",
		"How the sidecar's traffic is intercepted: 1 for the active mode (none, iptables, ebpf), 0 for the others.",
		[]string{"mode"}, nil)
	ebpfDesc = prometheus.NewDesc("weft_interception_ebpf_total",
		"eBPF interception events since attachment: redirected (to the outbound port), dns_redirected, excluded (the sidecar's own, by uid or mark), origdst_answered, origdst_missed (SO_ORIGINAL_DST with no entry), save_failed.",
		[]string{"event"}, nil)
	errDesc = prometheus.NewDesc("weft_interception_ebpf_read_errors_total",
		"Scrapes whose eBPF counters could not be read.", nil, nil)
)

// Collector exports the mode and, in EBPF mode, the programs' counters (read
// from their per-CPU map at scrape time).
func (a *Active) Collector() prometheus.Collector { return collector{a} }

type collector struct{ a *Active }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- modeDesc
	ch <- ebpfDesc
	ch <- errDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range []string{None, IPTables, EBPF} {
		v := 0.0
		if m == c.a.Mode {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(modeDesc, prometheus.GaugeValue, v, m)
	}
	s, ok, err := c.a.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(errDesc, err)
		return
	}
	if !ok {
		return
	}
	for _, e := range []struct {
		name string
		v    uint64
	}{
		{"redirected", s.Redirected}, {"dns_redirected", s.DNSRedirected}, {"excluded", s.Excluded},
		{"origdst_answered", s.OrigDstAnswered}, {"origdst_missed", s.OrigDstMissed}, {"save_failed", s.SaveFailed},
	} {
		ch <- prometheus.MustNewConstMetric(ebpfDesc, prometheus.CounterValue, float64(e.v), e.name)
	}
}
