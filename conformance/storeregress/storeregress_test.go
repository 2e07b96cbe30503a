// Package storeregress shows, with the real pilot and sidecar binaries, that
// the store cannot go backwards unnoticed (issue #11 item 3): pilot refuses to
// start on a store behind what it served or on another store, and says how to
// override; a sidecar refuses older content from a pilot that lost its record
// (NACK, keeps serving, shown by proxy-status); a deliberate regression
// (--accept-store-regression) raises the rollback epoch and sidecars take it.
package storeregress

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/store/boltstore/corrupt"
	"github.com/weft-mesh/weft/pilot/store/highwater"
	"github.com/weft-mesh/weft/sidecar/admin"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ip = "127.0.62.254"

func meshYAML(weight int) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: reviews-a, namespace: shop, labels: {app: reviews}}
spec: {address: 127.0.62.10, weight: %d}
`, weight)
}

// bulkYAML is n Workloads no Service selects, with padding: they make the
// store file hundreds of KiB without changing any sidecar's snapshot.
func bulkYAML(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Workload\nmetadata: {name: w-%d, namespace: bulk, labels: {app: bulk, pad: %s}}\nspec: {address: 127.0.62.%d}\n",
			i, strings.Repeat("x", 60), 20+i%200)
	}
	return b.String()
}

// activeRevision is the sidecar's active revision from its config_dump.
func activeRevision(s *proc.SidecarProcess) (int64, error) {
	resp, err := http.Get(s.AdminURL() + "/config_dump")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var d admin.ConfigDump
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return 0, err
	}
	return d.Revision, nil
}

// startFails runs bin/pilot on dataDir with extra flags and returns its
// output once it exits, failing the test if it does not exit non-zero.
func startFails(t *testing.T, dataDir string, extra ...string) string {
	t.Helper()
	args := append([]string{"--data-dir", dataDir, "--admin-addr", ip + ":15014", "--xds-addr", ip + ":15010", "--xds-tls-addr", ip + ":15012", "--webhook-addr", ip + ":15017"}, extra...)
	p := proc.Start(t, "pilot (refusing)", proc.Build(t, proc.Pilot), args...)
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("pilot did not exit on a store it must refuse:\n%s", p.Logs.String())
	}
	if p.Err() == nil {
		t.Fatalf("pilot exited 0 on a store it must refuse:\n%s", p.Logs.String())
	}
	return p.Logs.String()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestStoreRegression(t *testing.T) {
	data := filepath.Join(t.TempDir(), "pilot")
	db := filepath.Join(data, boltstore.FileName)
	saved := filepath.Join(t.TempDir(), "store-old.db")

	p := proc.StartPilot(t, ip, data)
	p.Apply(t, meshYAML(1))
	p.Apply(t, meshYAML(2))
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping pilot: %v", err)
	}
	copyFile(t, db, saved) // the store at revision 2: an "old backup"

	p = proc.StartPilot(t, ip, data)
	p.Apply(t, meshYAML(3)+bulkYAML(300)) // a store file big enough for every damage
	p.Apply(t, meshYAML(4))
	sc := proc.StartSidecar(t, proc.SidecarConfig{NodeID: "frontend-a", Namespace: "shop", ServiceAccount: "frontend",
		Labels: map[string]string{"app": "frontend"}, IP: "127.0.62.1", PlainPilot: p.XDSAddr(),
		Extra: []string{"--publisher-key", p.KeyFile()}})
	testkit.Wait(t, 30*time.Second, func() error {
		rev, err := activeRevision(sc)
		if err != nil || rev != 4 {
			return fmt.Errorf("sidecar active revision %d (%v), want 4", rev, err)
		}
		return nil
	})
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping pilot: %v", err)
	}
	current := filepath.Join(t.TempDir(), "store-current.db")
	copyFile(t, db, current)

	t.Run("older store refused", func(t *testing.T) {
		copyFile(t, saved, db)
		out := startFails(t, data)
		for _, want := range []string{"the store's head is revision 2, but this pilot has served revision 4", highwater.OverrideFlag} {
			if !strings.Contains(out, want) {
				t.Errorf("pilot's output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("empty file refused", func(t *testing.T) {
		if err := os.WriteFile(db, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if out := startFails(t, data); !strings.Contains(out, "is empty (0 bytes)") {
			t.Errorf("pilot's output does not say the store is empty:\n%s", out)
		}
	})
	t.Run("missing file refused", func(t *testing.T) {
		if err := os.Remove(db); err != nil {
			t.Fatal(err)
		}
		if out := startFails(t, data); !strings.Contains(out, "not the one this pilot served") {
			t.Errorf("pilot's output does not say the store is another:\n%s", out)
		}
	})
	// Issue #11's twelve damages of store.db, each through the real binary:
	// pilot exits with a clear error every time, and never serves.
	cur, err := os.ReadFile(current)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := corrupt.ReadMeta(cur)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) < corrupt.MinFileBytes {
		t.Fatalf("store file is %d bytes; the damages need at least %d", len(cur), corrupt.MinFileBytes)
	}
	for _, c := range corrupt.All {
		t.Run("corrupt/"+c.Name, func(t *testing.T) {
			if err := os.WriteFile(db, c.Do(append([]byte(nil), cur...), meta), 0o600); err != nil {
				t.Fatal(err)
			}
			out := startFails(t, data)
			if !strings.Contains(out, "store corrupt") && !strings.Contains(out, "store went backwards") {
				t.Errorf("pilot's output does not say the store is damaged or behind:\n%s", out)
			}
			// A Go crash prints goroutine stacks; serving logs the listeners.
			// (bbolt's own recovered assertion may be quoted in the error.)
			if strings.Contains(out, "goroutine ") || strings.Contains(out, "SIGSEGV") || strings.Contains(out, "SIGBUS") || strings.Contains(out, "xDS listening") {
				t.Errorf("pilot crashed or served on a damaged store:\n%s", out)
			}
		})
	}
	t.Run("truncated file refused", func(t *testing.T) {
		b, err := os.ReadFile(current)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(db, b[:8<<10], 0o600); err != nil { // two pages: meta only
			t.Fatal(err)
		}
		if out := startFails(t, data); !strings.Contains(out, "damaged") && !strings.Contains(out, "truncated") {
			t.Errorf("pilot's output does not say the store is damaged:\n%s", out)
		}
	})

	// A pilot whose record is gone serves the old store at the same epoch:
	// the sidecar refuses it, keeps serving revision 4, and says so to pilot.
	copyFile(t, saved, db)
	if err := os.Remove(filepath.Join(data, highwater.FileName)); err != nil {
		t.Fatal(err)
	}
	p = proc.StartPilot(t, ip, data)
	testkit.Wait(t, 30*time.Second, func() error {
		ps, err := p.ProxyStatus("frontend-a")
		if err != nil {
			return err
		}
		b, _ := json.Marshal(ps)
		if !strings.Contains(string(b), "lower than the active revision 4") {
			return fmt.Errorf("proxy status shows no refusal: %s", b)
		}
		return nil
	})
	if rev, err := activeRevision(sc); err != nil || rev != 4 {
		t.Fatalf("sidecar active revision %d (%v) after refusing the older store, want 4", rev, err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping pilot: %v", err)
	}

	// The deliberate way: the epoch goes up and the sidecar takes revision 2.
	p = proc.StartPilot(t, ip, data, "--accept-store-regression")
	testkit.Wait(t, 30*time.Second, func() error {
		rev, err := activeRevision(sc)
		if err != nil || rev != 2 {
			return fmt.Errorf("sidecar active revision %d (%v), want 2 after the accepted regression", rev, err)
		}
		return nil
	})
	rec, found, err := highwater.Load(data)
	if err != nil || !found || rec.RollbackEpoch == 0 || rec.Revision != 2 {
		t.Fatalf("record after --accept-store-regression = %+v (found %v, %v), want revision 2 at a raised epoch", rec, found, err)
	}
}
