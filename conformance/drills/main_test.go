// Package drills runs the sidecar's failure drills (issue #4) against real
// processes: bin/sidecar and bin/pilot built as `make build` builds them, a small
// Go application server, and an xDS server (go-control-plane's, with manifests
// signed by pilot/xds/sign, or a hand-driven one for protocol faults). The
// harness they share with drills/resilience and drills/etcd is
// conformance/internal/drillkit; the drills are split into these packages so
// `go test` runs them in parallel.
package drills

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(drillkit.Cleanup)) }
