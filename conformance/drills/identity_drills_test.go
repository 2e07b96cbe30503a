package drills

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// identityMesh: STRICT mTLS, certificates of ttl, Service reviews served by
// the reviews sidecar (app=reviews) in front of the application on its own IP.
func identityMesh(ttl time.Duration) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec:
  trustDomain: cluster.local
  defaultMtls: STRICT
  certificateTTL: %s
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
`, ttl)
}

type identityRig struct {
	pilot             *drillkit.PilotProc
	frontend, reviews *proc.SidecarProcess
	front             drillkit.Workload // the frontend sidecar's addresses, for the load generator
}

// startIdentityRig: pilot on base.254, frontend sidecar on base.1, reviews
// sidecar and application on base.2.
func startIdentityRig(t *testing.T, base string, ttl time.Duration) *identityRig {
	t.Helper()
	p := drillkit.StartPilot(t, base+".254", proc.Secure())
	p.ApplyYAML(identityMesh(ttl))
	drillkit.StartApp(t, base+".2:8080", "reviews")
	start := func(id, ip, app string) *proc.SidecarProcess {
		return proc.StartSidecar(t, proc.SidecarConfig{NodeID: id, Namespace: "shop", ServiceAccount: app,
			Labels: map[string]string{"app": app}, IP: ip, Pilot: p.PilotProcess, TokenTTL: time.Hour,
			Extra: []string{"--app-address", ip, "--xds-mode", "sotw"}})
	}
	r := &identityRig{pilot: p, reviews: start("reviews-a", base+".2", "reviews"), frontend: start("frontend-a", base+".1", "frontend"),
		front: drillkit.Workload{IP: base + ".1", NodeID: "frontend-a"}}
	for _, s := range []*proc.SidecarProcess{r.reviews, r.frontend} {
		waitCert(t, s, "valid", 30*time.Second)
	}
	testkit.Wait(t, 30*time.Second, func() error { return r.call() })
	return r
}

// call sends one request frontend -> reviews (mTLS) -> application.
func (r *identityRig) call() error {
	code, body, _, err := drillkit.Get(drillkit.Client, r.front, "reviews:9080", "/id")
	if err != nil {
		return err
	}
	if code != http.StatusOK || body != "reviews /id" {
		return fmt.Errorf("answer %d %q", code, body)
	}
	return nil
}

// Drill (a): pilot stopped and the workload certificates reach NotAfter: mTLS
// to and from the sidecars stops (refused, counted, said in readiness),
// routing state is still there, and service resumes by itself once pilot is
// back and reissues.
func TestDrillCertificateExpiresWithPilotDown(t *testing.T) {
	const ttl = 12 * time.Second
	r := startIdentityRig(t, "127.79.1", ttl)
	if v := metric(r.frontend, `weft_sidecar_mtls_handshakes_total{result="ok",side="client"}`); v == 0 {
		t.Fatal("no client mTLS handshake counted on the frontend")
	}
	r.pilot.Down()
	downAt := time.Now()
	waitCert(t, r.reviews, "expired", ttl+30*time.Second)
	t.Logf("reviews' certificate expired %s after pilot was killed", time.Since(downAt).Round(time.Millisecond))
	// New connections are refused (never made in plaintext), and /metrics says
	// why. The first failed request may be one on a pooled connection the
	// expiry closed; keep calling until a new handshake was refused.
	var refused error
	testkit.Wait(t, 10*time.Second, func() error {
		if refused = r.call(); refused == nil {
			return fmt.Errorf("a request still succeeded with an expired certificate")
		}
		expired := metric(r.reviews, `weft_sidecar_mtls_handshakes_total{result="certificate_expired",side="server"}`) +
			metric(r.frontend, `weft_sidecar_mtls_handshakes_total{result="certificate_expired",side="client"}`)
		if expired == 0 {
			return fmt.Errorf("no handshake refused as certificate_expired in /metrics yet")
		}
		return nil
	})
	t.Logf("a request through the frontend now: %v", refused)
	code, body := readyOf(r.reviews)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "certificate: expired") {
		t.Fatalf("reviews readiness with an expired certificate: %d %q", code, body)
	}
	t.Logf("reviews readiness: %d %q", code, body)
	// Routing state is still there.
	if cd := dumpOf(t, r.frontend); !strings.Contains(cd, "reviews") {
		t.Fatal("the frontend's configuration lost reviews while pilot was down")
	}
	r.pilot.Up()
	back := time.Now()
	waitCert(t, r.reviews, "valid", 30*time.Second)
	waitCert(t, r.frontend, "valid", 30*time.Second)
	testkit.Wait(t, 30*time.Second, func() error { return r.call() })
	t.Logf("service resumed %s after pilot returned", time.Since(back).Round(time.Millisecond))
}

// Drill (c): root rotation with overlap under load: POST rotation (the bundle
// carries old and new roots, new certificates come from the new root), wait
// until no unexpired certificate of the old root is left, DELETE rotation;
// no request fails across it.
func TestDrillRootRotationUnderLoad(t *testing.T) {
	const ttl = 12 * time.Second
	r := startIdentityRig(t, "127.79.3", ttl)
	start := time.Now()
	lg := drillkit.StartRate(t, r.front, "reviews:9080", 50)
	var rot struct {
		Signer   string `json:"signer"`
		Previous string `json:"previous"`
	}
	if err := json.Unmarshal(caAPI(t, r.pilot, http.MethodPost, "rotation"), &rot); err != nil || rot.Previous == "" || rot.Signer == rot.Previous {
		t.Fatalf("rotation started: %+v (%v)", rot, err)
	}
	rotated := time.Now()
	testkit.Wait(t, 4*ttl, func() error {
		var st struct {
			Rotating            bool `json:"rotating"`
			OldRootCertificates int  `json:"oldRootCertificates"`
		}
		if err := json.Unmarshal(caAPI(t, r.pilot, http.MethodGet, "rotation"), &st); err != nil {
			return err
		}
		if st.OldRootCertificates > 0 {
			return fmt.Errorf("%d unexpired certificates from the old root", st.OldRootCertificates)
		}
		return nil
	})
	t.Logf("no unexpired certificate of the old root %s after the rotation started", time.Since(rotated).Round(time.Millisecond))
	// Both workloads now hold certificates from the new root.
	var list struct {
		Certificates []struct {
			SPIFFEID, Issuer, State string
		} `json:"certificates"`
	}
	if err := json.Unmarshal(caAPI(t, r.pilot, http.MethodGet, "certificates"), &list); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"spiffe://cluster.local/ns/shop/sa/frontend", "spiffe://cluster.local/ns/shop/sa/reviews"} {
		n := 0
		for _, c := range list.Certificates {
			if c.SPIFFEID == id && c.State == "VALID" {
				if c.Issuer != rot.Signer {
					t.Fatalf("%s holds a valid certificate from %s, want the new root %s", id, c.Issuer, rot.Signer)
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s has no valid certificate from the new root", id)
		}
	}
	caAPI(t, r.pilot, http.MethodDelete, "rotation")
	finished := time.Now()
	// Load keeps going past the finish: 2s of it (100 requests at 50/s) answered.
	testkit.Wait(t, 30*time.Second, func() error {
		if n := len(lg.Since(finished)); n < 100 {
			return fmt.Errorf("%d requests answered since the rotation finished, want 100", n)
		}
		return nil
	})
	lg.Stop()
	rs := lg.Since(start)
	failed, first := 0, ""
	for _, x := range rs {
		if !x.OK() || x.Body != "reviews /drill" {
			if failed++; first == "" {
				first = fmt.Sprintf("code %d body %q err %v", x.Code, x.Body, x.Err)
			}
		}
	}
	t.Logf("root rotation: %d requests at 50/s over %s, %d failed", len(rs), time.Since(start).Round(time.Second), failed)
	// Every connection of a replaced certificate was retired (drained, then
	// closed) before its NotAfter: none was left for Sweep to cut, which would
	// fail what is in flight on it.
	cut := metric(r.frontend, `weft_sidecar_mtls_connections_closed_total{reason="expired"}`) +
		metric(r.reviews, `weft_sidecar_mtls_connections_closed_total{reason="expired"}`)
	t.Logf("connections closed at a NotAfter (cut, not retired): %v", cut)
	if cut != 0 {
		t.Errorf("%v connections were cut at a certificate's NotAfter instead of retired before it", cut)
	}
	if failed > 0 {
		t.Fatalf("%d of %d requests failed across the rotation, first: %s", failed, len(rs), first)
	}
	if err := r.call(); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
}

// waitCert waits for weft_sidecar_certificate_state{state} to be 1.
func waitCert(t *testing.T, s *proc.SidecarProcess, state string, within time.Duration) {
	t.Helper()
	testkit.Wait(t, within, func() error {
		select {
		case <-s.Exited():
			t.Fatalf("%s exited: %v", s.Name, s.Err())
		default:
		}
		l, err := s.Metric(fmt.Sprintf(`weft_sidecar_certificate_state{state=%q}`, state))
		if err != nil {
			return err
		}
		if !strings.HasSuffix(l, " 1") {
			return fmt.Errorf("%s: %s", s.Name, l)
		}
		return nil
	})
}

func readyOf(s *proc.SidecarProcess) (int, string) {
	resp, err := drillkit.Client.Get(s.ReadyURL())
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// caAPI calls pilot's CA admin API and returns the body of a 2xx answer.
func caAPI(t *testing.T, p *drillkit.PilotProc, method, path string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, p.URL()+"/apis/ca/v1/"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := drillkit.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	return b
}

// Drill: a sidecar restarted while pilot is down keeps its workload
// certificate and key (persisted in its state directory, mode 0600), so mTLS
// to it is served on, from its last-known-good routes, until that
// certificate's NotAfter, and refused after it (never plaintext instead).
func TestDrillRestartWithPilotDownKeepsMTLS(t *testing.T) {
	const ttl = 20 * time.Second
	const base = "127.79.4"
	p := drillkit.StartPilot(t, base+".254", proc.Secure())
	p.ApplyYAML(identityMesh(ttl))
	drillkit.StartApp(t, base+".2:8080", "reviews")
	// Reviews is started with its token minted up front and a state directory
	// of its own, so it can be started again with pilot down.
	reviewsCfg := proc.SidecarConfig{NodeID: "reviews-a", Namespace: "shop", ServiceAccount: "reviews",
		Labels: map[string]string{"app": "reviews"}, IP: base + ".2", StateDir: t.TempDir(), PlainPilot: p.XDSTLSAddr(),
		Extra: append(proc.IdentityFlags(t, p.PilotProcess, t.TempDir(), "shop", "reviews", time.Hour),
			"--publisher-key", p.KeyFile(), "--app-address", base+".2", "--xds-mode", "sotw")}
	r := &identityRig{pilot: p, reviews: proc.StartSidecar(t, reviewsCfg),
		frontend: proc.StartSidecar(t, proc.SidecarConfig{NodeID: "frontend-a", Namespace: "shop", ServiceAccount: "frontend",
			Labels: map[string]string{"app": "frontend"}, IP: base + ".1", Pilot: p.PilotProcess, TokenTTL: time.Hour,
			Extra: []string{"--app-address", base + ".1", "--xds-mode", "sotw"}}),
		front: drillkit.Workload{IP: base + ".1", NodeID: "frontend-a"}}
	for _, s := range []*proc.SidecarProcess{r.reviews, r.frontend} {
		waitCert(t, s, "valid", 30*time.Second)
	}
	testkit.Wait(t, 30*time.Second, func() error { return r.call() })
	// Reviews' routes and trust bundle are saved as last-known-good.
	testkit.Wait(t, 30*time.Second, func() error {
		cd, err := drillkit.ConfigDumpAt(r.reviews.AdminURL())
		if err != nil {
			return err
		}
		if cd.Active == nil || cd.LastKnownGood.SavedAt.Before(cd.Active.ActivatedAt) {
			return fmt.Errorf("reviews' configuration not yet saved as last-known-good")
		}
		return nil
	})

	r.pilot.Down()
	_ = r.reviews.Stop(r.reviews.Grace)
	r.reviews = proc.StartSidecar(t, reviewsCfg)
	restarted := time.Now()
	testkit.Wait(t, 10*time.Second, func() error { return r.call() })
	t.Logf("reviews restarted with pilot down: mTLS served %s after its start", time.Since(restarted).Round(time.Millisecond))
	if !strings.Contains(r.reviews.Logs.String(), "workload certificate restored from the state directory") {
		t.Fatalf("reviews did not restore its certificate:\n%s", r.reviews.Logs.String())
	}
	if v := metric(r.reviews, `weft_sidecar_mtls_handshakes_total{result="ok",side="server"}`) +
		metric(r.reviews, `weft_sidecar_mtls_handshakes_total{result="resumed",side="server"}`); v == 0 {
		t.Fatal("no server mTLS handshake counted on the restarted reviews")
	}
	l, err := r.reviews.Metric(`weft_sidecar_certificate_expiry_seconds`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted reviews: %s", l)

	// At its NotAfter mTLS stops: refused, said in readiness, never plaintext.
	waitCert(t, r.reviews, "expired", ttl+30*time.Second)
	testkit.Wait(t, 10*time.Second, func() error {
		if err := r.call(); err == nil {
			return fmt.Errorf("a request still succeeded after reviews' certificate expired")
		}
		return nil
	})
	code, body := readyOf(r.reviews)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "certificate: expired") {
		t.Fatalf("reviews readiness with an expired certificate: %d %q", code, body)
	}
	if v := metric(r.reviews, `weft_sidecar_mtls_plaintext_accepted_total`); v != 0 {
		t.Fatalf("reviews accepted %v plaintext connections", v)
	}
	t.Logf("after NotAfter: readiness %d %q", code, body)
}
