package outlierreport

import (
	"fmt"
	"testing"
)

// full is a report at MaxEntries: 256 ejections over 16 services.
func full() *Report {
	r := &Report{Node: "sidecar~10.1.2.3~productpage-v1-6d8f7c9b5-x2x4q.shop~shop.svc.cluster.local"}
	for i := range MaxEntries {
		r.Entries = append(r.Entries, Entry{Service: fmt.Sprintf("outbound|9080||svc%02d.shop.svc.cluster.local", i/16),
			Endpoint: fmt.Sprintf("10.0.%d.%d:9080", i/16, i%16+10), Detector: Consecutive5xx, Age: 42e9, Times: 2})
	}
	r.Total = MaxEntries
	return r
}

func BenchmarkEncodeFull(b *testing.B) {
	r := full()
	var n int
	for b.Loop() {
		buf, err := Encode(r)
		if err != nil {
			b.Fatal(err)
		}
		n = len(buf)
	}
	b.ReportMetric(float64(n), "bytes/report")
}

func BenchmarkDecodeFull(b *testing.B) {
	buf, err := Encode(full())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}
