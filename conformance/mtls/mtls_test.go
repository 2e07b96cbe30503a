// Package mtls_test runs real bin/pilot and bin/sidecar processes with
// identities (bootstrap tokens, certificates from pilot's CA) and checks mTLS
// between the sidecars (issue #9): STRICT refuses plaintext, a certificate from
// another CA is refused, a revoked client is refused after one CRL push and its
// open connection closed, a server with the wrong SPIFFE ID is refused by the
// client, and drill (b): a CRL past NextUpdate + grace with pilot stopped
// refuses new handshakes with the reason in readiness.
package mtls_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/sidecar/svid"

	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

const (
	reviewsID     = "spiffe://cluster.local/ns/shop/sa/reviews"
	productpageID = "spiffe://cluster.local/ns/shop/sa/productpage"
	ratingsID     = "spiffe://cluster.local/ns/shop/sa/ratings"
	within        = 30 * time.Second // a push, a handshake, a process start
)

// base is a loopback /24 of this test binary's own (pid), so parallel packages
// do not collide; each test takes its own third octet.
func base(t *testing.T, n int) string {
	t.Helper()
	return fmt.Sprintf("127.%d.%d", 100+os.Getpid()%100, 10+n)
}

// mesh: pilot, the app on .1:8080, sidecar reviews-1 on .1 (in front of the
// app, inbound port in mode), sidecar productpage-1 on .2 calling reviews:9080.
type mesh struct {
	t              *testing.T
	ip             string
	pilot          *proc.PilotProcess
	server, client *proc.SidecarProcess
}

func meshYAML(mode, crlValidity string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec:
  crlValidity: %s
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 8080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  mtls: %s
`, crlValidity, mode)
}

func startApp(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "reviews") })}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

func newMesh(t *testing.T, n int, mode string, extra ...string) *mesh {
	t.Helper()
	ip := base(t, n)
	m := &mesh{t: t, ip: ip}
	m.pilot = proc.StartPilot(t, ip+".254", filepath.Join(t.TempDir(), "pilot"))
	crl := "1h"
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "crlValidity" {
			crl = extra[i+1]
		}
	}
	m.pilot.Apply(t, meshYAML(mode, crl))
	startApp(t, ip+".1:8080")
	sidecarFlags := []string{"--app-address", ip + ".1"}
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "sidecar" {
			sidecarFlags = append(sidecarFlags, strings.Fields(extra[i+1])...)
		}
	}
	m.server = proc.StartSidecar(t, proc.SidecarConfig{NodeID: "reviews-1", Namespace: "shop", ServiceAccount: "reviews",
		Labels: map[string]string{"app": "reviews"}, IP: ip + ".1", Pilot: m.pilot, Extra: sidecarFlags})
	m.client = proc.StartSidecar(t, proc.SidecarConfig{NodeID: "productpage-1", Namespace: "shop", ServiceAccount: "productpage",
		Labels: map[string]string{"app": "productpage"}, IP: ip + ".2", Pilot: m.pilot, Extra: sidecarFlags[2:]})
	testkit.Wait(t, within, func() error {
		code, body, err := m.get()
		if err != nil || code != 200 {
			return fmt.Errorf("productpage → reviews: %d %q %v\nserver:\n%s\nclient:\n%s", code, body, err, tail(m.server), tail(m.client))
		}
		return nil
	})
	if v := m.metric(m.server, `weft_sidecar_mtls_handshakes_total{result="ok",side="server"}`); v < 1 {
		t.Fatalf("the request did not come over mTLS: server handshakes ok = %v", v)
	}
	return m
}

func tail(p *proc.SidecarProcess) string {
	s := p.Logs.String()
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

// get sends one request through the client sidecar's outbound listener.
func (m *mesh) get() (int, string, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "http://"+m.client.OutboundAddr()+"/", nil)
	req.Host = "reviews:9080"
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// metric reads one sample of p's /metrics (0 when absent).
func (m *mesh) metric(p *proc.SidecarProcess, name string) float64 {
	m.t.Helper()
	v, err := p.MetricValue(name)
	if err != nil && !errors.Is(err, proc.ErrNoMetric) {
		m.t.Fatal(err)
	}
	return v
}

func (m *mesh) waitMetric(p *proc.SidecarProcess, name string, atLeast float64) {
	m.t.Helper()
	testkit.Wait(m.t, within, func() error {
		if v := m.metric(p, name); v < atLeast {
			return fmt.Errorf("%s = %v, want ≥ %v", name, v, atLeast)
		}
		return nil
	})
}

func TestStrictRefusesPlaintextClient(t *testing.T) {
	m := newMesh(t, 1, "STRICT")
	c, err := net.Dial("tcp", m.server.InboundAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: reviews:9080\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("plaintext to a STRICT inbound was answered: %q", b)
	}
	m.waitMetric(m.server, "weft_sidecar_mtls_plaintext_refused_total", 1)
}

func TestClientFromAnotherCARefused(t *testing.T) {
	m := newMesh(t, 2, "STRICT")
	stranger := mtlstest.NewCA(t, "another root").Workload(t, "cluster.local", "shop", "productpage")
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{stranger.Cert}, NextProtos: []string{"h2"}}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", m.server.InboundAddr(), cfg)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the refusal comes after the client's Finished
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("a client certified by another CA: %v, want the server's bad_certificate alert", err)
	}
	m.waitMetric(m.server, `weft_sidecar_mtls_handshakes_total{result="untrusted",side="server"}`, 1)
}

// revoke revokes every certificate of id through pilot's admin API and returns
// the CRL number that lists them.
func (m *mesh) revoke(id string) int64 {
	m.t.Helper()
	return m.revokeWith(map[string]string{"spiffeId": id, "reason": "keyCompromise"})
}

// revokeWith posts a revocation request: pilot adds it to the CRL and re-signs
// it at once (with the MeshConfig's current crlValidity) and pushes it.
func (m *mesh) revokeWith(req map[string]string) int64 {
	m.t.Helper()
	b, _ := json.Marshal(req)
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Post(m.pilot.URL()+"/apis/ca/v1/revocations", "application/json", bytes.NewReader(b))
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var r struct {
		Revoked   []string `json:"revoked"`
		CRLNumber int64    `json:"crlNumber"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(out, &r) != nil || len(r.Revoked) == 0 {
		m.t.Fatalf("revoking %v: %s %s", req, resp.Status, out)
	}
	return r.CRLNumber
}

func TestRevokedClientRefusedWithinOnePushAndClosed(t *testing.T) {
	m := newMesh(t, 3, "STRICT")
	live := m.metric(m.server, "weft_sidecar_mtls_connections ")
	if live < 1 {
		t.Fatalf("server has %v live mTLS connections, want the client's pooled one", live)
	}
	n := m.revoke(productpageID)
	// The push carrying CRL n closes the client's open connection on the server...
	m.waitMetric(m.server, `weft_sidecar_mtls_connections_closed_total{reason="revoked"}`, 1)
	m.waitMetric(m.server, `weft_sidecar_crl_state{state="fresh"}`, 1)
	if r := readiness(t, m.server); crlNumber(r) < n {
		t.Errorf("server readiness does not show CRL %d or later:\n%s", n, r)
	}
	// ...and every new handshake of the revoked client is refused.
	code, body, err := m.get()
	if err == nil && code == 200 {
		t.Fatalf("a revoked client was served: %d %q", code, body)
	}
	m.waitMetric(m.server, `weft_sidecar_mtls_handshakes_total{result="revoked",side="server"}`, 1)
}

var crlLine = regexp.MustCompile(`crl: \w+ number=(\d+)`)

// crlNumber is the CRL number a readiness body shows (-1: none).
func crlNumber(ready string) int64 {
	mm := crlLine.FindStringSubmatch(ready)
	if mm == nil {
		return -1
	}
	n, _ := strconv.ParseInt(mm[1], 10, 64)
	return n
}

func readiness(t *testing.T, p *proc.SidecarProcess) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(p.ReadyURL())
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + "\n" + string(b)
}

// TestWrongServerIDRefusedByClient: with pilot stopped (the client keeps its
// configuration: reviews at .1:15006 running as sa reviews), the reviews
// sidecar is replaced at its address by a server with a genuine mesh
// certificate of another service account (ratings): the client's handshake
// verifies the chain and refuses the SPIFFE ID.
func TestWrongServerIDRefusedByClient(t *testing.T) {
	m := newMesh(t, 4, "STRICT")
	if err := m.pilot.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m.server.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	impostor := impostorCert(t, m)
	ln, err := tls.Listen("tcp", m.server.InboundAddr(), &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{impostor},
		ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	testkit.Wait(t, within, func() error {
		code, body, err := m.get()
		if err == nil && code == 200 {
			t.Fatalf("served by a server with the wrong SPIFFE ID: %q", body)
		}
		if v := m.metric(m.client, `weft_sidecar_mtls_handshakes_total{result="unexpected_peer",side="client"}`); v < 1 {
			return fmt.Errorf("client unexpected_peer = %v (last answer %d %q %v)", v, code, body, err)
		}
		return nil
	})
	if _, body, _ := m.get(); !strings.Contains(body, reviewsID) || !strings.Contains(body, ratingsID) {
		t.Logf("the 503 does not name both IDs (%q); the client's log:\n%s", body, tail(m.client))
	}
}

// impostorCert is a genuine mesh certificate for another identity than
// reviews' (spiffe://cluster.local/ns/shop/sa/ratings), issued by pilot's own CA
// from its data dir (pilot is stopped).
func impostorCert(t *testing.T, m *mesh) tls.Certificate {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: filepath.Join(m.pilot.DataDir, "ca"), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := c.SignKey(key.Public(), spiffeid.RequireFromString(ratingsID), nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := svid.New(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	return s.Cert
}

// TestDrillCRLPastGraceRefusesNewHandshakes (drill b): CRLs valid 2s, sidecars'
// --crl-grace 1s, pilot stopped: past NextUpdate + grace the server refuses
// every new handshake (crl_expired), says why in readiness (503), and the
// client can no longer reach it.
func TestDrillCRLPastGraceRefusesNewHandshakes(t *testing.T) {
	m := newMesh(t, 5, "STRICT", "crlValidity", "2s", "sidecar", "--crl-grace 1s")
	// The first CRL was signed before the MeshConfig: a revocation (of a serial
	// nobody holds) re-signs it with the 2s validity; wait until it arrived.
	n := m.revokeWith(map[string]string{"serial": "0a11ce"})
	testkit.Wait(t, within, func() error {
		if got := crlNumber(readiness(t, m.server)); got < n {
			return fmt.Errorf("server has CRL %d, want ≥ %d", got, n)
		}
		return nil
	})
	if err := m.pilot.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, within, func() error {
		r := readiness(t, m.server)
		if !strings.HasPrefix(r, "503") || !strings.Contains(r, "crl: expired") || !strings.Contains(r, "NextUpdate") {
			return fmt.Errorf("server readiness:\n%s", r)
		}
		return nil
	})
	m.waitMetric(m.server, `weft_sidecar_crl_state{state="expired"}`, 1)
	// A new connection (the pooled one may still be open: only new handshakes stop).
	c, err := tls.Dial("tcp", m.server.InboundAddr(), &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("a handshake succeeded past the CRL's NextUpdate + grace")
	}
	m.waitMetric(m.server, `weft_sidecar_mtls_handshakes_total{result="crl_expired",side="server"}`, 1)
}
