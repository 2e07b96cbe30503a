// Package resilience runs the sidecar's resilience and overload drills (issues
// #4 and #8) against real processes: bin/pilot, bin/sidecar and upstream
// applications that a drill switches between healthy, failing and slow
// (harness: conformance/internal/drillkit and resilience_test.go).
package resilience

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(drillkit.Cleanup)) }
