package proc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/meshctl"
	"github.com/weft-mesh/weft/tools/testkit"
)

// PilotStartTimeout bounds StartPilot's wait for pilot to answer /healthz and to
// have written its publisher key (generous: builds and tests share 2 cores).
const PilotStartTimeout = 30 * time.Second

// PilotProcess is a running bin/pilot with its admin API on IP:15014, xDS on IP:15010
// (plaintext) and IP:15012 (TLS, once pilot has its CA), the injection webhook on
// IP:15017 and its store in DataDir.
type PilotProcess struct {
	*Proc
	IP, DataDir string
	// Secure: started with proc.Secure(), without --insecure-plaintext-registration.
	Secure bool
	// Netns: started inside it (StartPilotIn); nil: here.
	Netns Netns

	adminIP string // IP, or loopback inside Netns (pilot's admin API serves only loopback clients)
}

// secureArg is what Secure returns: StartPilot removes it from the flags.
const secureArg = "\x00proc.Secure"

// Secure, among StartPilot's extra flags, starts pilot without
// --insecure-plaintext-registration: a plaintext client may read, not register
// (what identity tests need). Without it, StartPilot passes the flag so tests of
// other features register their sidecars over plaintext as before.
func Secure() string { return secureArg }

// StartPilot builds and starts bin/pilot with pushes debounced 10ms (tests
// apply and wait), --insecure-plaintext-registration unless Secure() is among
// extra, and the extra flags, which may override the rest; and waits for it.
func StartPilot(t testing.TB, ip, dataDir string, extra ...string) *PilotProcess {
	t.Helper()
	return StartPilotIn(t, nil, ip, dataDir, extra...)
}

// StartPilotIn is StartPilot inside ns (nil: here): ip is an address of ns (a
// pods.Node's gateway, say), and the readiness wait, Apply, MintToken and
// ProxyStatus reach pilot from inside ns. Inside ns the admin API is on
// 127.0.0.1:15014 (it serves only loopback clients), xDS on ip.
func StartPilotIn(t testing.TB, ns Netns, ip, dataDir string, extra ...string) *PilotProcess {
	t.Helper()
	p := &PilotProcess{IP: ip, DataDir: dataDir, Netns: ns, adminIP: ip}
	if ns != nil {
		p.adminIP = "127.0.0.1"
	}
	flags := make([]string, 0, len(extra))
	for _, f := range extra {
		if f == secureArg {
			p.Secure = true
			continue
		}
		flags = append(flags, f)
	}
	args := []string{"--data-dir", dataDir, "--admin-addr", p.adminIP + ":15014", "--xds-addr", p.XDSAddr(), "--xds-tls-addr", p.XDSTLSAddr(),
		"--webhook-addr", p.WebhookAddr(), "--xds-debounce", "10ms"}
	if !p.Secure {
		args = append(args, "--insecure-plaintext-registration")
	}
	args = append(args, flags...)
	p.Proc = StartIn(t, ns, "pilot", Build(t, Pilot), args...)
	hc := httpClient(ns, 2*time.Second)
	testkit.Wait(t, PilotStartTimeout, func() error {
		select {
		case <-p.Exited():
			t.Fatalf("pilot exited: %v\n%s", p.Err(), p.Logs.String())
		default:
		}
		resp, err := hc.Get(p.URL() + "/healthz")
		if err != nil {
			return fmt.Errorf("pilot /healthz: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("pilot /healthz: %s", resp.Status)
		}
		// Pilot writes its publisher key after it answers /healthz; sidecars need it.
		if _, err := os.Stat(p.KeyFile()); err != nil {
			return fmt.Errorf("pilot's publisher key: %w", err)
		}
		return nil
	})
	return p
}

// URL is pilot's admin API (from inside Netns, when it has one).
func (p *PilotProcess) URL() string { return "http://" + p.adminIP + ":15014" }

// XDSAddr is pilot's plaintext xDS address.
func (p *PilotProcess) XDSAddr() string { return p.IP + ":15010" }

// XDSTLSAddr is pilot's xDS (and CSR) address over TLS.
func (p *PilotProcess) XDSTLSAddr() string { return p.IP + ":15012" }

// WebhookAddr is pilot's injection webhook (HTTPS, bootstrap/webhook).
func (p *PilotProcess) WebhookAddr() string { return p.IP + ":15017" }

// CARootFile is the mesh CA's root certificate pilot writes (a sidecar's
// --ca-root).
func (p *PilotProcess) CARootFile() string { return filepath.Join(p.DataDir, "ca", "root.pem") }

// KeyFile is the publisher key pilot writes, which sidecars verify manifests with.
func (p *PilotProcess) KeyFile() string { return filepath.Join(p.DataDir, "publisher.pub") }

// Apply applies the YAML documents with meshctl apply (with a Netns, the
// bin/meshctl binary run inside it).
func (p *PilotProcess) Apply(t testing.TB, yaml string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.Netns != nil {
		cmd := p.Netns.Command(Build(t, Meshctl), "--pilot", p.URL(), "apply", "-f", f)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("meshctl apply: %v: %s", err, out)
		}
		return
	}
	var out, errb strings.Builder
	if code := meshctl.Run(context.Background(), []string{"--pilot", p.URL(), "apply", "-f", f}, &out, &errb); code != 0 {
		t.Fatalf("meshctl apply: exit %d: %s %s", code, out.String(), errb.String())
	}
}
