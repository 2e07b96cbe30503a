package app

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
	"github.com/weft-mesh/weft/tools/testkit"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOutlierShell: the goroutine logs an ejection made on the request path at
// once, with its numbers and duration, returns the host when its time is served
// (without any interval passing) and logs that, and an interval-driven detector
// (failure percentage) ejects at its tick.
func TestOutlierShell(t *testing.T) {
	reg := cluster.NewRegistry()
	sh := reg.Shared("outbound|80||svc")
	if err := sh.Outlier.Configure(&outlier.Config{Consecutive5xx: 3, EnforcingConsecutive5xx: 100,
		FailurePercentage: &outlier.FailurePercentage{Threshold: 50, MinimumHosts: 1, RequestVolume: 4, Enforcing: 100},
		Interval:          time.Hour, BaseEjectionTime: 150 * time.Millisecond, MaxEjectionTime: time.Hour, MaxEjectionPercent: 100}); err != nil {
		t.Fatal(err)
	}
	eps := []*cluster.Endpoint{
		cluster.NewEndpoint(netip.MustParseAddrPort("10.0.0.1:80"), 1, true),
		cluster.NewEndpoint(netip.MustParseAddrPort("10.0.0.2:80"), 1, true),
	}
	c, err := cluster.New(cluster.Spec{Name: "outbound|80||svc", ConnectTimeout: time.Second, Shared: sh, Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	reg.Retain([]*cluster.Cluster{c})
	var logs syncBuf
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runOutliers(ctx, reg, log) }()
	defer func() { cancel(); <-done }()

	for range 3 {
		c.Observe(eps[0], 503)
	}
	testkit.Eventually(t, 5*time.Second, "ejection logged", func() bool {
		return strings.Contains(logs.String(), `host ejected: service=outbound|80||svc host=10.0.0.1:80 detector=consecutive5xx numbers="3 consecutive (threshold 3)" duration=150ms multiplier=1`)
	})
	if !eps[0].Host.Outlier.Ejected() {
		t.Fatal("not ejected")
	}
	testkit.Eventually(t, 5*time.Second, "return logged", func() bool {
		return strings.Contains(logs.String(), `host returned: service=outbound|80||svc host=10.0.0.1:80 detector=consecutive5xx`) &&
			strings.Contains(logs.String(), `reason="ejection time served"`)
	})
	if eps[0].Host.Outlier.Ejected() {
		t.Fatal("logged returned, still ejected")
	}
	// An interval of an hour is too long for a test: a new configuration with a
	// short one starts the interval (the activation's wake-up), and the tick at its
	// end judges the failure percentage.
	if err := sh.Outlier.Configure(&outlier.Config{FailurePercentage: &outlier.FailurePercentage{Threshold: 50, MinimumHosts: 1, RequestVolume: 4, Enforcing: 100},
		Interval: 100 * time.Millisecond, BaseEjectionTime: time.Hour, MaxEjectionTime: time.Hour, MaxEjectionPercent: 100}); err != nil {
		t.Fatal(err)
	}
	reg.Retain([]*cluster.Cluster{c}) // what activation does: it wakes the goroutine
	testkit.Eventually(t, 5*time.Second, "failure percentage ejection", func() bool {
		for range 4 {
			c.Observe(eps[1], 500)
		}
		return strings.Contains(logs.String(), `host=10.0.0.2:80 detector=failurePercentage numbers="failure 100.0% >= threshold 50% (`)
	})
}
