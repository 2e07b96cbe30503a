package drills

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
)

// serviceYAML is one more Service in the sidecar's namespace: every sidecar of
// the namespace gets its cluster and route, so each apply changes what the
// sidecar must hold.
func serviceYAML(i int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: extra-%d, namespace: shop}
spec:
  selector: {app: extra-%d}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
`, i, i)
}

// readyStarts is how many sidecars TestReadyMeansCurrent starts.
const readyStarts = 50

// TestReadyMeansCurrent (issue #7 finding 9): a new sidecar (no last-known-good)
// started right after an apply, 50 times in a row against one real pilot, is
// never ready on a revision older than the store's when it connected, and is
// ready on a configuration pilot confirmed current. Pilot compiles 150ms after
// a write, so each sidecar connects while pilot still holds the mesh compiled
// before the apply: before the fix it was sent that mesh and reported ready on
// it. Every poll reads /config_dump, whose ready flag and revision come from one
// immutable runtime snapshot, so a ready answer is checked against the revision
// it was given on.
func TestReadyMeansCurrent(t *testing.T) {
	base := "127.77.90"
	sidecarIP, appIP := base+".1", base+".2"
	drillkit.StartApp(t, appIP+":8080", "v1")
	p := drillkit.StartPilot(t, sidecarIP, "--xds-debounce", "150ms", "--xds-max-delay", "150ms")
	p.ApplyRev(drillkit.MeshYAML(appIP))
	var took []time.Duration
	for i := range readyStarts {
		rev := p.ApplyRev(serviceYAML(i))
		w := drillkit.Workload{IP: sidecarIP, NodeID: fmt.Sprintf("productpage-%d", i), StateDir: filepath.Join(t.TempDir(), "state"), KeyFile: p.KeyFile()}
		start := time.Now()
		sc := drillkit.StartSidecar(t, w, p.Addr())
		polls := 0
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("sidecar %d ready", i), func() bool {
			resp, err := drillkit.Client.Get("http://" + w.Admin() + "/config_dump")
			if err != nil {
				return false // not listening yet
			}
			defer resp.Body.Close()
			var cd struct {
				Ready    bool   `json:"ready"`
				Revision int64  `json:"revision"`
				Reason   string `json:"reason"`
				Active   *struct {
					Current bool `json:"current"`
				} `json:"active"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&cd); err != nil {
				t.Fatalf("sidecar %d: config_dump: %v", i, err)
			}
			polls++
			if !cd.Ready {
				return false
			}
			if cd.Revision < rev || cd.Active == nil || !cd.Active.Current {
				t.Fatalf("sidecar %d ready at revision %d (current %v), store was at %d when it started; after %d polls",
					i, cd.Revision, cd.Active != nil && cd.Active.Current, rev, polls)
			}
			return true
		})
		took = append(took, time.Since(start))
		if code, body := sc.Ready(); code != http.StatusOK {
			t.Fatalf("sidecar %d: /healthz/ready %d %q after config_dump said ready", i, code, body)
		}
		sc.Terminate()
	}
	t.Logf("%d sidecars started right after an apply, each ready on a current configuration; start to ready: first %v, last %v",
		readyStarts, took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
