package drills

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"github.com/weft-mesh/weft/tools/testkit"
)

// The sidecar binary against go-control-plane's server, the independent referee,
// in SotW and delta, with signed manifests and as a plain xDS client
// (--insecure-skip-manifest): it activates a good version, NACKs a version that
// does not compile and keeps serving the old one, and takes the next good one.
func TestInteropGoControlPlane(t *testing.T) {
	tests := []struct {
		mode   string
		signed bool
	}{{"sotw", true}, {"delta", true}, {"sotw", false}, {"delta", false}}
	for i, tc := range tests {
		name := fmt.Sprintf("%s/signed=%v", tc.mode, tc.signed)
		t.Run(name, func(t *testing.T) {
			ip := fmt.Sprintf("127.77.6%d", i)
			priv := drillkit.NewKey(t)
			w := drillkit.NewWorkload(t, ip+".1", "productpage-a", priv.Public().(ed25519.PublicKey))
			drillkit.StartApp(t, ip+".2:8080", "v1")
			drillkit.StartApp(t, ip+".3:8080", "v2")
			validity, extra := time.Duration(0), []string{"--xds-mode", tc.mode}
			if !tc.signed {
				validity, extra = -1, append(extra, "--insecure-skip-manifest")
			}
			ref := drillkit.NewRefServer(t, ip+".1:15010", priv, w.NodeID)
			ref.Push(drillkit.MeshTo(w, ip+".2:8080"), 1, validity)
			sc := drillkit.StartSidecar(t, w, ref.Addr(), extra...)
			sc.WaitReady(10 * time.Second)
			serves := func(want string) bool {
				code, body, _, err := drillkit.Get(drillkit.Client, w, "reviews:9080", "/")
				return err == nil && code == http.StatusOK && body == want+" /"
			}
			if !serves("v1") {
				t.Fatal("v1 not served")
			}
			if cd := sc.ConfigDump(); cd.XDS.Mode != tc.mode || (cd.Manifest != nil) != tc.signed {
				t.Fatalf("mode %q, manifest %+v", cd.XDS.Mode, cd.Manifest)
			}

			// Version 2: the route names a cluster that does not exist.
			bad := drillkit.MeshTo(w, ip+".2:8080")
			bad[xdsresource.RouteType] = nil
			bad.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "nowhere", 0))))
			ref.Push(bad, 2, validity)
			var nack string
			testkit.Eventually(t, 10*time.Second, "NACK of version 2", func() bool {
				for _, ts := range sc.ConfigDump().XDS.Types {
					if strings.Contains(ts.LastError, "nowhere") {
						nack = ts.LastError
						return true
					}
				}
				return false
			})
			t.Logf("NACK: %s", nack)
			if !serves("v1") || sc.ConfigDump().Counters.Rejected == 0 {
				t.Fatal("old version not kept after the NACK")
			}

			// Version 3 recovers.
			ref.Push(drillkit.MeshTo(w, ip+".3:8080"), 3, validity)
			testkit.Eventually(t, 10*time.Second, "version 3 served", func() bool { return serves("v2") })
		})
	}
}
