// Package drillkit is the harness the failure drills (conformance/drills and
// the packages below it) share: loopback workloads and the real bin/sidecar on
// them, the real bin/pilot or go-control-plane's ADS server as control plane,
// small application servers, a recording load generator and the sidecar's admin
// endpoints. It is imported only by tests; every helper takes the test's
// testing.TB and fails it.
package drillkit

import (
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// Cleanup removes what the drills' processes left (the built binaries, etcd
// data directories) when a drills test binary ends; it fits goleak.Cleanup:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(drillkit.Cleanup)) }
func Cleanup(code int) {
	proc.Cleanup(code)
	etcdtest.Cleanup(code)
}
