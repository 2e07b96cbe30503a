package drills

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/sidecar/runtime"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// Drill (e) of issue #9: pilot restarted with a new publisher key certified by
// the same CA (its key file deleted while it was down; the CA root stays).
// Sidecars trust publishers through --ca-root, no key pinned: every sidecar
// accepts the next push, signed by the new key, without a restart, and one
// restarted meanwhile with pilot down boots from its last-known-good (signed
// by the old key, still certified). Then, pilot down again, a sidecar
// restarted boots from the last-known-good the new key signed. In both xDS
// modes (SDS ROOTCA is subscribed by name through the manifest).
func TestDrillNewPublisherKey(t *testing.T) {
	for i, mode := range []string{"sotw", "delta"} {
		t.Run(mode, func(t *testing.T) { newPublisherKey(t, fmt.Sprintf("127.79.6%d", i), mode) })
	}
}

func newPublisherKey(t *testing.T, base, mode string) {
	p := drillkit.StartPilot(t, base+".254", proc.Secure())
	p.ApplyYAML(drillkit.MeshYAML(base + ".2"))
	drillkit.StartApp(t, base+".2:8080", "v1")
	drillkit.StartApp(t, base+".4:8080", "d1")

	newSidecar := func(node, ip string) proc.SidecarConfig {
		// Identity flags without --publisher-key: the CA bundle decides.
		flags := proc.IdentityFlags(t, p.PilotProcess, t.TempDir(), "shop", "productpage", time.Hour)
		return proc.SidecarConfig{NodeID: node, Namespace: "shop", ServiceAccount: "productpage",
			Labels: map[string]string{"app": "productpage"}, IP: ip, StateDir: t.TempDir(), PlainPilot: p.XDSTLSAddr(),
			Extra: append(flags, "--xds-mode", mode)}
	}
	cfgA, cfgB := newSidecar("productpage-a", base+".1"), newSidecar("productpage-b", base+".3")
	serves := func(ip, host, want string) func() error {
		return func() error {
			code, body, _, err := drillkit.Get(drillkit.Client, drillkit.Workload{IP: ip}, host+":9080", "/e")
			if err != nil {
				return err
			}
			if code != http.StatusOK || body != want+" /e" {
				return fmt.Errorf("%s via %s: %d %q", host, ip, code, body)
			}
			return nil
		}
	}
	// signedBy waits until s's active manifest is signed by key id keyID, pilot
	// confirmed it current, and it is saved as last-known-good; it returns the
	// manifest's publisher serial.
	signedBy := func(s *proc.SidecarProcess, keyID string) string {
		t.Helper()
		var serial string
		testkit.Wait(t, 30*time.Second, func() error {
			cd, err := drillkit.ConfigDumpAt(s.AdminURL())
			if err != nil {
				return err
			}
			m := cd.Manifest
			switch {
			case cd.Active == nil || m == nil:
				return errors.New("nothing active")
			case m.KeyID != keyID:
				return fmt.Errorf("active manifest signed by %s, want %s", m.KeyID, keyID)
			case m.Publisher != "spiffe://cluster.local/weft/publisher":
				return fmt.Errorf("active manifest's publisher %q: not verified through the CA", m.Publisher)
			case !m.Current || cd.Active.Source != runtime.SourceXDS:
				return fmt.Errorf("active: source %s current %v", cd.Active.Source, m.Current)
			case cd.LastKnownGood.SavedAt.Before(cd.Active.ActivatedAt):
				return errors.New("not yet saved as last-known-good")
			}
			serial = m.PublisherSerial
			return nil
		})
		return serial
	}
	keyID := func() string {
		t.Helper()
		pub, err := manifest.LoadPublicKey(p.KeyFile())
		if err != nil {
			t.Fatal(err)
		}
		return manifest.KeyID(pub)
	}

	a, b := proc.StartSidecar(t, cfgA), proc.StartSidecar(t, cfgB)
	k1 := keyID()
	for _, s := range []*proc.SidecarProcess{a, b} {
		testkit.Wait(t, 30*time.Second, serves(s.Config.IP, "reviews", "v1"))
		signedBy(s, k1)
	}

	// Pilot goes down and loses its publisher key; its CA root stays.
	p.Down()
	for _, f := range []string{manifest.PrivateKeyFile, manifest.PublicKeyFile} {
		if err := os.Remove(filepath.Join(p.DataDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// B restarts meanwhile and boots from its last-known-good (old key).
	_ = b.Stop(b.Grace)
	b = proc.StartSidecar(t, cfgB)
	start := time.Now()
	testkit.Wait(t, 10*time.Second, serves(cfgB.IP, "reviews", "v1"))
	cd, err := drillkit.ConfigDumpAt(b.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	if cd.Active == nil || cd.Active.Source != runtime.SourceLKG || cd.Manifest == nil || cd.Manifest.KeyID != k1 {
		t.Fatalf("restarted with pilot down: active %+v manifest %+v", cd.Active, cd.Manifest)
	}
	t.Logf("B restarted with pilot down: serving from its last-known-good (key %s) %s after start", k1, time.Since(start).Round(time.Millisecond))

	// Pilot returns with a new key, certified by the same CA, and a change.
	p.Up()
	k2 := keyID()
	if k2 == k1 {
		t.Fatal("pilot kept its publisher key")
	}
	p.ApplyYAML(drillkit.ServiceYAML("details", base+".4"))
	back := time.Now()
	for _, s := range []*proc.SidecarProcess{a, b} {
		serial := signedBy(s, k2)
		testkit.Wait(t, 30*time.Second, serves(s.Config.IP, "details", "d1"))
		t.Logf("%s: next push accepted, signed by the new key %s (publisher certificate %s), %s after pilot returned",
			s.Config.NodeID, k2, serial, time.Since(back).Round(time.Millisecond))
		cd, err := drillkit.ConfigDumpAt(s.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range cd.XDS.Types {
			if ty.TypeURL == manifest.TypeURL && ty.NACKs != 0 {
				t.Fatalf("%s NACKed a manifest: %s", s.Config.NodeID, ty.LastError)
			}
		}
		if strings.Contains(s.Logs.String(), "manifest refused") {
			t.Fatalf("%s refused a manifest:\n%s", s.Config.NodeID, s.Logs.String())
		}
	}
	if isExited(a) {
		t.Fatal("A did not keep running")
	}

	// Pilot down again: A restarted boots from the last-known-good the new key signed.
	p.Down()
	_ = a.Stop(a.Grace)
	a = proc.StartSidecar(t, cfgA)
	testkit.Wait(t, 10*time.Second, serves(cfgA.IP, "details", "d1"))
	if cd, err := drillkit.ConfigDumpAt(a.AdminURL()); err != nil || cd.Active == nil || cd.Active.Source != runtime.SourceLKG || cd.Manifest.KeyID != k2 {
		t.Fatalf("A restarted with pilot down: %+v %v", cd, err)
	}
}

func isExited(s *proc.SidecarProcess) bool {
	select {
	case <-s.Exited():
		return true
	default:
		return false
	}
}
