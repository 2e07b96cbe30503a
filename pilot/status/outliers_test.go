package status

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/internal/outlierreport"
	"github.com/weft-mesh/weft/pilot/status/outlieragg"
)

func ejecting(id string) *outlierreport.Report {
	return &outlierreport.Report{Node: id, Total: 1, Entries: []outlierreport.Entry{{
		Service: "outbound|80||a.b.svc.cluster.local", Endpoint: "10.0.0.1:80", Detector: outlierreport.Consecutive5xx, Times: 1}}}
}

func TestReportOutliersChecksTheStream(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	n := &node.Node{ID: "a"}
	if err := tr.ReportOutliers("10.0.0.9:5000", ejecting("a"), t0); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("no stream: %v", err)
	}
	c := tr.ConnectFrom(n, "10.0.0.9:5000", t0)
	if err := tr.ReportOutliers("10.0.0.9:5001", ejecting("a"), t0); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("another port of the same host: %v", err)
	}
	if err := tr.ReportOutliers("10.0.0.9:5000", ejecting("a"), t0); err != nil {
		t.Fatalf("its stream's peer: %v", err)
	}
	// A stream opened by Connect (no peer known) takes no reports.
	tr.Connect(&node.Node{ID: "b"}, t0)
	if err := tr.ReportOutliers("", ejecting("b"), t0); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("a stream without a peer: %v", err)
	}
	c.Disconnect(t0)
	if v := tr.Outliers(t0); v.Entries != 0 || v.Reporters != 0 {
		t.Fatalf("after the stream ended: %+v", v)
	}
	// Listed as DISCONNECTED, but its reports are refused.
	if err := tr.ReportOutliers("10.0.0.9:5000", ejecting("a"), t0); !errors.Is(err, ErrUnknownNode) || err.Error() !=
		"outlier report of node a: no ADS stream of this node from this peer (its stream ended)" {
		t.Fatalf("after the stream ended: %v", err)
	}
	// A newer stream of the node replaces it; the old one's end leaves the new report.
	c1 := tr.ConnectFrom(n, "10.0.0.9:6000", t0)
	c2 := tr.ConnectFrom(n, "10.0.0.9:7000", t0)
	if err := tr.ReportOutliers("10.0.0.9:6000", ejecting("a"), t0); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("the replaced stream's peer: %v", err)
	}
	if err := tr.ReportOutliers("10.0.0.9:7000", ejecting("a"), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c1.Disconnect(t0)
	if v := tr.Outliers(t0); v.Entries != 1 {
		t.Fatalf("the old stream's end dropped the new one's report: %+v", v)
	}
	c2.Disconnect(t0)
	if v := tr.Outliers(t0); v.Entries != 0 {
		t.Fatalf("after the last stream ended: %+v", v)
	}
	if _, err := New(Config{Logger: tr.log, Registerer: prometheus.NewRegistry(), Retention: time.Minute, MaxDisconnected: 1, MaxRevisions: 1,
		Outliers: outlieragg.Limits{TTL: time.Second}}); err == nil {
		t.Error("partial outlier limits accepted")
	}
}

// Reports racing with their streams' ends never outlive them (run with -race).
func TestReportsNeverOutliveTheirStream(t *testing.T) {
	clk := &fakeClock{now: t0}
	tr, _ := newTracker(t, clk)
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("n%d", i)
			for j := range 50 {
				peer := fmt.Sprintf("10.0.0.%d:%d", i, 1000+j)
				now := t0.Add(time.Duration(j) * outlierreport.RateWindow) // a fresh rate window each time
				c := tr.ConnectFrom(&node.Node{ID: id}, peer, now)
				start, done := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(done)
					<-start
					// Report until refused: the stream's end lands somewhere in between.
					for k := 0; tr.ReportOutliers(peer, ejecting(id), now.Add(time.Duration(k)*time.Nanosecond)) == nil; k++ {
						accepted.Add(1)
					}
				}()
				close(start)
				runtime.Gosched()
				c.Disconnect(now)
				<-done
			}
		})
	}
	wg.Wait()
	// Read without expiring anything: no TTL may hide a leftover.
	tr.omu.Lock()
	left, reporters := tr.outliers.Entries(), len(tr.outliers.Reporters())
	tr.omu.Unlock()
	if left != 0 || reporters != 0 {
		t.Fatalf("reports outlived their streams: %d entries of %d reporters (%d reports accepted)", left, reporters, accepted.Load())
	}
	t.Logf("%d reports were accepted before their streams ended", accepted.Load())
}
