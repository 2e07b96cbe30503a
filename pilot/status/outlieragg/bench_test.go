package outlieragg

import (
	"fmt"
	"testing"
	"time"

	"github.com/weft-mesh/weft/internal/outlierreport"
)

func fullReport(node string) *outlierreport.Report {
	r := &outlierreport.Report{Node: node, Total: outlierreport.MaxEntries}
	for i := range outlierreport.MaxEntries {
		r.Entries = append(r.Entries, outlierreport.Entry{Service: fmt.Sprintf("outbound|9080||svc%02d.shop.svc.cluster.local", i/16),
			Endpoint: fmt.Sprintf("10.0.%d.%d:9080", i/16, i%16+10), Detector: outlierreport.Consecutive5xx, Times: 1})
	}
	return r
}

// BenchmarkPutFull: one node refreshing a report at MaxEntries.
func BenchmarkPutFull(b *testing.B) {
	l := DefaultLimits()
	l.MaxReportsPerWindow = 1 << 30
	a, _ := New(l)
	r := fullReport("n")
	now := t0
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := a.Put("n", 1, r, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkView1000x10: the admin view over 1,000 proxies each ejecting the
// same 10 endpoints.
func BenchmarkView1000x10(b *testing.B) {
	a, _ := New(DefaultLimits())
	r := fullReport("x")
	r.Entries, r.Total = r.Entries[:10], 10
	for i := range 1000 {
		r.Node = fmt.Sprintf("n%d", i)
		if err := a.Put(r.Node, uint64(i+1), r, t0); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if v := a.View(t0, holdsAll); len(v.Endpoints) != 10 || v.Endpoints[0].EjectedBy != 1000 {
			b.Fatal(v.Endpoints[0])
		}
	}
}
