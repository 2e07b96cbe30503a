package drills

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/sidecar/admin"
	"github.com/weft-mesh/weft/sidecar/certclient"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// Identity drills (issue #9) against a real pilot (its CA, TLS xDS on
// :15012, no plaintext registration) and sidecars with identities.

func dumpOf(t *testing.T, s *proc.SidecarProcess) string {
	t.Helper()
	resp, err := drillkit.Client.Get(s.AdminURL() + "/config_dump")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Restarted while pilot is down without a certificate (none persisted: here
// removed from its state directory, as for a certificate that expired or a
// first start), a sidecar with an identity cannot get one: the signed
// last-known-good activates anyway and routing serves (here to a plaintext
// Workload), while it keeps asking for the certificate; once pilot is back it
// gets one with its token and reconnects over mTLS. (With its certificate
// persisted, see TestDrillRestartWithPilotDownKeepsMTLS.)
func TestDrillRestartWithoutPilotBeforeCertificate(t *testing.T) {
	base := "127.79.5"
	p := drillkit.StartPilot(t, base+".254", proc.Secure())
	p.ApplyYAML(drillkit.MeshYAML(base + ".2"))
	drillkit.StartApp(t, base+".2:8080", "v1")
	flags := append(proc.IdentityFlags(t, p.PilotProcess, t.TempDir(), "shop", "productpage", time.Hour), "--publisher-key", p.KeyFile())
	cfg := proc.SidecarConfig{NodeID: "productpage-a", Namespace: "shop", ServiceAccount: "productpage",
		Labels: map[string]string{"app": "productpage"}, IP: base + ".1", StateDir: t.TempDir(), PlainPilot: p.XDSTLSAddr(),
		Extra: append(flags, "--xds-mode", "sotw")}
	front := drillkit.Workload{IP: base + ".1"}
	call := func() error {
		code, body, _, err := drillkit.Get(drillkit.Client, front, "reviews:9080", "/lkg")
		if err != nil {
			return err
		}
		if code != http.StatusOK || body != "v1 /lkg" {
			return fmt.Errorf("answer %d %q", code, body)
		}
		return nil
	}
	s := proc.StartSidecar(t, cfg)
	testkit.Wait(t, 30*time.Second, call)
	testkit.Wait(t, 10*time.Second, func() error {
		var cd admin.ConfigDump
		if err := json.Unmarshal([]byte(dumpOf(t, s)), &cd); err != nil {
			return err
		}
		if cd.LastKnownGood.SavedAt.IsZero() {
			return fmt.Errorf("last-known-good not saved yet")
		}
		return nil
	})
	_ = s.Stop(s.Grace)
	p.Down()
	if err := os.Remove(filepath.Join(cfg.StateDir, certclient.FileName)); err != nil {
		t.Fatalf("the certificate was not persisted: %v", err)
	}

	s = proc.StartSidecar(t, cfg)
	start := time.Now()
	testkit.Wait(t, 10*time.Second, call)
	t.Logf("routing served from the last-known-good %s after the restart, without a certificate", time.Since(start).Round(time.Millisecond))
	if v := metric(s, `weft_sidecar_certificate_requests_total{credential="token",result="ok"}`); v != 0 {
		t.Fatalf("got a certificate with pilot down (%v)", v)
	}
	testkit.Wait(t, 10*time.Second, func() error {
		if v := metric(s, `weft_sidecar_certificate_requests_total{credential="token",result="error"}`); v == 0 {
			return fmt.Errorf("no failed CSR counted yet")
		}
		return nil
	})
	p.Up()
	back := time.Now()
	testkit.Wait(t, 30*time.Second, func() error {
		if v := metric(s, "weft_sidecar_xds_connected"); v != 1 {
			return fmt.Errorf("not reconnected")
		}
		return nil
	})
	t.Logf("certificate and mTLS xDS stream %s after pilot returned", time.Since(back).Round(time.Millisecond))
	if err := call(); err != nil {
		t.Fatal(err)
	}
}
