package drills

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/runtime/runtimetest"
	"github.com/weft-mesh/weft/tools/testkit"
)

// Drill (c): the persisted last-known-good file altered by one byte, taken from
// another node, or past its validity is refused with one log line naming the
// check; the sidecar stays not ready and says why.
func TestDrillLKGRefused(t *testing.T) {
	tests := []struct {
		name     string
		ip       string
		validity time.Duration
		alter    func(t *testing.T, w *drillkit.Workload, validUntil time.Time)
		check    string
	}{
		{"one byte altered", "127.77.3.1", 0, func(t *testing.T, w *drillkit.Workload, _ time.Time) {
			if err := runtimetest.AlterOneByte(filepath.Join(w.StateDir, lkg.FileName)); err != nil {
				t.Fatal(err)
			}
		}, "digest"},
		{"another node's file", "127.77.3.2", 0, func(t *testing.T, w *drillkit.Workload, _ time.Time) {
			w.NodeID = "ratings-v1-a" // same state dir, other identity
		}, "node"},
		{"past its validity", "127.77.3.3", 2 * time.Second, func(t *testing.T, w *drillkit.Workload, validUntil time.Time) {
			// The manifest was signed valid for 2s: wait for its end, no longer.
			testkit.Eventually(t, 5*time.Second, "the manifest's validity passed", func() bool { return !time.Now().Before(validUntil) })
		}, "validity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			priv := drillkit.NewKey(t)
			w := drillkit.NewWorkload(t, tc.ip, "reviews-v1-a", priv.Public().(ed25519.PublicKey))
			drillkit.StartApp(t, tc.ip+":8080", "app")
			pilot := drillkit.NewRefServer(t, tc.ip+":15010", priv, w.NodeID)
			pilot.Push(drillkit.MeshTo(w, tc.ip+":8080"), 1, tc.validity)
			sc := drillkit.StartSidecar(t, w, pilot.Addr())
			sc.WaitReady(10 * time.Second)
			testkit.Eventually(t, 5*time.Second, "last-known-good saved", func() bool { return !sc.ConfigDump().LastKnownGood.SavedAt.IsZero() })
			mi := sc.ConfigDump().Manifest
			if mi == nil {
				t.Fatal("config_dump has no manifest")
			}
			sc.Terminate()
			pilot.Stop()

			tc.alter(t, &w, mi.ValidUntil)
			sc = drillkit.StartSidecar(t, w, pilot.Addr())
			// The sidecar gives pilot 500ms before it tries the file and refuses it.
			want := "last-known-good refused (" + tc.check + " check failed): "
			testkit.Wait(t, 10*time.Second, func() error {
				if code, body := sc.Ready(); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, want) {
					return fmt.Errorf("readiness = %d %q, want 503 %q...", code, body, want)
				}
				return nil
			})
			// Readiness changes just before the log line is written and read back.
			testkit.Eventually(t, 5*time.Second, "the refusal logged", func() bool { return strings.Count(sc.Logs.String(), "last-known-good refused") > 0 })
			if n := strings.Count(sc.Logs.String(), "last-known-good refused"); n != 1 {
				t.Fatalf("%d refusal log lines, want 1:\n%s", n, sc.Logs.String())
			}
			if !strings.Contains(sc.Logs.String(), "check=") || !strings.Contains(sc.Logs.String(), tc.check) {
				t.Fatalf("log does not name check %q:\n%s", tc.check, sc.Logs.String())
			}
			// Nothing is served either.
			code, _, _, err := drillkit.Get(drillkit.Client, w, "reviews", "/")
			if err == nil && code == http.StatusOK {
				t.Fatal("refused snapshot served a request")
			}
		})
	}
}
