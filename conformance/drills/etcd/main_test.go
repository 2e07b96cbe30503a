// Package etcd runs the drills of pilot on etcd (issue #11) against real
// processes: a 3-member etcd cluster (tools/testkit/etcdtest), bin/pilot
// replicas sharing it, and bin/sidecar (harness: conformance/internal/drillkit).
package etcd

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(drillkit.Cleanup)) }
