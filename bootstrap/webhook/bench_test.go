package webhook

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/weft-mesh/weft/bootstrap/inject"
)

// BenchmarkReview: one whole review of a Pod as a ReplicaSet creates it
// (decode, inject, patch, encode), as pilot answers it per pod creation.
func BenchmarkReview(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("testdata", "replicaset-pod.request.json"))
	if err != nil {
		b.Fatal(err)
	}
	settings := func() (inject.Config, error) { return inject.Config{}, nil }
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, outcome, err := Review(body, settings); err != nil || outcome != Injected {
			b.Fatal(outcome, err)
		}
	}
}
