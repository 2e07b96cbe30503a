package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/certclient"
	"github.com/weft-mesh/weft/tools/testkit"
)

// A sidecar started with an identity from a secure pilot (no plaintext
// registration) gets its certificate with the minted token, renews nothing yet
// (24h), and holds an xDS stream over mTLS on pilot's TLS port.
func TestStartSidecarWithIdentity(t *testing.T) {
	p := StartPilot(t, "127.81.0.254", filepath.Join(t.TempDir(), "pilot"), Secure())
	s := StartSidecar(t, SidecarConfig{NodeID: "reviews-a", Namespace: "shop", ServiceAccount: "reviews",
		Labels: map[string]string{"app": "reviews"}, IP: "127.81.0.2", Pilot: p, TokenTTL: 10 * time.Minute})
	for _, want := range []string{
		`weft_sidecar_certificate_requests_total{credential="token",result="ok"} 1`,
		"weft_sidecar_xds_connected 1",
	} {
		name := want[:strings.LastIndexByte(want, ' ')]
		testkit.Wait(t, 30*time.Second, func() error {
			select {
			case <-s.Exited():
				t.Fatalf("sidecar exited: %v", s.Err())
			default:
			}
			got, err := s.Metric(name)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s, want %s", got, want)
			}
			return nil
		})
	}
	if !strings.Contains(s.Logs.String(), "credential=token") || !strings.Contains(s.Logs.String(), "spiffe://cluster.local/ns/shop/sa/reviews") {
		t.Fatalf("sidecar log does not show the certificate it got:\n%s", s.Logs.String())
	}
}

// A token for another service account is refused by pilot: the sidecar keeps
// retrying and never connects.
func TestStartSidecarWrongToken(t *testing.T) {
	p := StartPilot(t, "127.81.1.254", filepath.Join(t.TempDir(), "pilot"), Secure())
	flags := IdentityFlags(t, p, t.TempDir(), "shop", "ratings", 0)
	s := StartSidecar(t, SidecarConfig{NodeID: "reviews-a", Namespace: "shop", ServiceAccount: "reviews",
		Labels: map[string]string{"app": "reviews"}, IP: "127.81.1.2", PlainPilot: p.XDSTLSAddr(), Extra: append(flags,
			"--publisher-key", p.KeyFile())})
	testkit.Wait(t, 30*time.Second, func() error {
		got, err := s.Metric(`weft_sidecar_certificate_requests_total{credential="token",result="error"}`)
		if err != nil || strings.HasSuffix(got, " 0") {
			return fmt.Errorf("no refused CSR yet: %q %v", got, err)
		}
		return nil
	})
	if !strings.Contains(s.Logs.String(), "spiffe://cluster.local/ns/shop/sa/ratings") {
		t.Fatalf("the refusal does not name the granted ID:\n%s", s.Logs.String())
	}
	if got, _ := s.Metric("weft_sidecar_xds_connected"); got != "weft_sidecar_xds_connected 0" {
		t.Fatalf("xDS connected without a certificate: %s", got)
	}
}

// With --certificate-in-memory-only the workload key never reaches the state
// directory, and one an earlier run persisted there is removed at start.
// (Without the flag each of the three checks fails: the sidecar persists.)
func TestStartSidecarCertificateInMemoryOnly(t *testing.T) {
	p := StartPilot(t, "127.81.2.254", filepath.Join(t.TempDir(), "pilot"), Secure())
	state := t.TempDir()
	earlier := filepath.Join(state, certclient.FileName)
	if err := os.WriteFile(earlier, []byte("an earlier run's certificate and key"), certclient.FileMode); err != nil {
		t.Fatal(err)
	}
	s := StartSidecar(t, SidecarConfig{NodeID: "reviews-m", Namespace: "shop", ServiceAccount: "reviews",
		Labels: map[string]string{"app": "reviews"}, IP: "127.81.2.2", Pilot: p, TokenTTL: 10 * time.Minute,
		StateDir: state, Extra: []string{"--certificate-in-memory-only"}})
	const want = `weft_sidecar_certificate_requests_total{credential="token",result="ok"} 1`
	testkit.Wait(t, 30*time.Second, func() error {
		select {
		case <-s.Exited():
			t.Fatalf("sidecar exited: %v", s.Err())
		default:
		}
		got, err := s.Metric(want[:strings.LastIndexByte(want, ' ')])
		if err != nil || got != want {
			return fmt.Errorf("%s (%v), want %s", got, err, want)
		}
		return nil
	})
	if _, err := os.Stat(earlier); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after start: %v, want it removed", earlier, err)
	}
	if !strings.Contains(s.Logs.String(), "removed the workload certificate an earlier run persisted") {
		t.Errorf("the removal is not in the sidecar's log:\n%s", s.Logs.String())
	}
	entries, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(state, e.Name())); err == nil && strings.Contains(string(b), "PRIVATE KEY") {
			t.Errorf("state directory file %s holds a private key", e.Name())
		}
	}
}
