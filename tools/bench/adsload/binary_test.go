package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

// TestBinarySmall is `make bench`'s load test at a size for CI: the real pilot
// binary, 200 sidecars each on its own mTLS connection, 50 of them endpoints of
// one Service, two endpoint changes. It checks that the harness measures what
// it says (every sidecar takes every change, the -verify clients see the new
// endpoint in the assignment they decode, the joins cost few pushes) and
// bounds what this size may cost, loosely, for a shared CI machine. With two
// replicas on one etcd (apt's etcd-server), every watcher's assignment holds
// every registered sidecar, whichever replica each is connected to.
func TestBinarySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pilot and 200 TLS clients")
	}
	bin := proc.Build(t, proc.Pilot)
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) { binarySmall(t, bin, replicas) })
	}
}

func binarySmall(t *testing.T, bin string, replicas int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := runBinary(ctx, binConfig{pilotBin: bin, proxies: 200, endpoints: 50, services: 10, rounds: 2, conc: 50, verify: 2, log: io.Discard,
		replicas: replicas, etcdBin: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.rounds) != 2 {
		t.Fatalf("%d rounds measured, want 2", len(r.rounds))
	}
	for i, rr := range r.rounds {
		if rr.p50 <= 0 || rr.p99 < rr.p50 || rr.max < rr.p99 {
			t.Errorf("round %d: latencies out of order: %+v", i+1, rr)
		}
		if rr.max > 10*time.Second {
			t.Errorf("round %d: the change took %v to reach every sidecar", i+1, rr.max)
		}
	}
	// The joins are coalesced: 50 registrations within a few debounce windows
	// are a handful of pushes of the big assignment to each watcher, not 50.
	for _, n := range r.joinPushes {
		if n > 10 {
			t.Errorf("a watcher got the big assignment %d times while 50 endpoints joined (joins took %v)", n, r.joinTime)
			break
		}
	}
	if r.hwm <= 0 || r.hwm < r.rssIdle {
		t.Errorf("pilot VmHWM %d not read (idle RSS %d)", r.hwm, r.rssIdle)
	}
	if r.bytesPerChange <= 0 {
		t.Errorf("no bytes counted per change")
	}
}
