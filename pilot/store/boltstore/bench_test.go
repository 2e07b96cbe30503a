package boltstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
)

// Both benchmarks create realistic Services (two ports, labels, selector) and
// report objects committed per second, fsync included.

func BenchmarkApplySingle(b *testing.B) {
	benchApply(b, 1)
}

func BenchmarkApplyBulk1000(b *testing.B) {
	benchApply(b, 1000)
}

func benchApply(b *testing.B, perApply int) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	}()
	ctx := context.Background()
	muts := make([]store.Mutation, perApply)
	n := 0
	for b.Loop() {
		for j := range muts {
			muts[j] = store.Mutation{Op: store.OpPut, Object: storetest.Service("default", fmt.Sprintf("svc-%d-%d", n, j), int32(j%100))}
		}
		if _, err := s.Apply(ctx, muts); err != nil {
			b.Fatalf("Apply: %v", err)
		}
		n++
	}
	b.ReportMetric(float64(n*perApply)/b.Elapsed().Seconds(), "objects/s")
}
