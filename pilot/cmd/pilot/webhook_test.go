package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/bootstrap/webhook"
	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// webhookClient trusts only the mesh CA root the pilot process wrote, and
// checks the certificate for name, as the API server does with the
// MutatingWebhookConfiguration's caBundle and the Service's DNS name.
func webhookClient(t *testing.T, p *proc.PilotProcess, name string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(p.CARootFile())
	if err != nil {
		t.Fatal(err)
	}
	roots, err := bundle.Parse(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots.Pool(), ServerName: name, MinVersion: tls.VersionTLS12}}}
}

// TestWebhookServesTLS: bin/pilot serves the injection webhook on its
// --webhook-addr over TLS verified by the mesh CA root for the Service's DNS
// name; a real AdmissionReview gets the JSONPatch; the MeshConfig in pilot's
// store is what injection reads.
func TestWebhookServesTLS(t *testing.T) {
	const ip = "127.91.17.1"
	p := proc.StartPilot(t, ip, t.TempDir())
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "bootstrap", "webhook", "testdata", "replicaset-pod.request.json"))
	if err != nil {
		t.Fatal(err)
	}
	hc := webhookClient(t, p, server.DefaultWebhookDNS)
	resp, err := hc.Post("https://"+p.WebhookAddr()+webhook.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST over TLS verified by the mesh CA root for %s: %v", server.DefaultWebhookDNS, err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %v: %s", resp.Status, err, out)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &r); err != nil || r.Response == nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !r.Response.Allowed || r.Response.UID != "7b1d9c3e-2a4f-4e6b-9c8d-1e2f3a4b5c6d" || !bytes.Contains(r.Response.Patch, []byte(`"name":"weft-proxy"`)) ||
		!bytes.Contains(r.Response.Patch, []byte(`"--pilot=`+inject.DefaultPilotAddress+`"`)) {
		t.Fatalf("response %+v: want allowed with the injection patch", r.Response)
	}
	leaf := resp.TLS.PeerCertificates[0]
	if !slices.Contains(leaf.DNSNames, server.DefaultWebhookDNS) || len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/weft/pilot" {
		t.Errorf("serving certificate: DNS %v URIs %v", leaf.DNSNames, leaf.URIs)
	}
	// Another name is refused by the client's verification.
	if _, err := webhookClient(t, p, "evil.weft-system.svc").Post("https://"+p.WebhookAddr()+webhook.Path, "application/json", bytes.NewReader(body)); err == nil {
		t.Error("a name the certificate does not carry verified")
	}
	// MeshConfig's sidecar is read on every review: the next pod gets it.
	p.Apply(t, "apiVersion: mesh.weft.dev/v1alpha1\nkind: MeshConfig\nmetadata: {name: default}\nspec:\n  sidecar: {image: reg.example/weft/sidecar:1.2, cpu: 200m, memory: 96Mi}\n")
	resp, err = hc.Post("https://"+p.WebhookAddr()+webhook.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || json.Unmarshal(out, &r) != nil || r.Response == nil {
		t.Fatalf("second review: %v %s", err, out)
	}
	for _, want := range []string{`"image":"reg.example/weft/sidecar:1.2"`, `"cpu":"200m"`, `"memory":"96Mi"`} {
		if !bytes.Contains(r.Response.Patch, []byte(want)) {
			t.Errorf("after the MeshConfig, the patch lacks %s", want)
		}
	}
	if n, err := metric(p, `weft_pilot_webhook_reviews_total{result="injected"}`); err != nil || n != 2 {
		t.Errorf("injected reviews metric %v %v, want 2", n, err)
	}
}

// TestWebhookFlags: --webhook-san replaces the default name; "off" listens on
// nothing.
func TestWebhookFlags(t *testing.T) {
	const ip = "127.91.17.2"
	p := proc.StartPilot(t, ip, t.TempDir(), "--webhook-san", "inject.example.test")
	hc := webhookClient(t, p, "inject.example.test")
	resp, err := hc.Post("https://"+p.WebhookAddr()+webhook.Path, "application/json", bytes.NewReader([]byte("not json")))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// A malformed review: allowed, no patch (and logged by pilot).
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &r); err != nil || r.Response == nil || !r.Response.Allowed || r.Response.Patch != nil {
		t.Fatalf("malformed review answered %s (%v)", out, err)
	}
	if _, err := webhookClient(t, p, server.DefaultWebhookDNS).Get("https://" + p.WebhookAddr() + webhook.Path); err == nil {
		t.Error("the default name verified though --webhook-san replaced it")
	}

	const ip2 = "127.91.17.3"
	q := proc.StartPilot(t, ip2, t.TempDir(), "--webhook-addr", "off")
	c, err := net.DialTimeout("tcp", q.WebhookAddr(), 2*time.Second)
	if err == nil {
		c.Close()
		t.Fatal("--webhook-addr off: something listens on the webhook port")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial: %v, want connection refused", err)
	}
}
