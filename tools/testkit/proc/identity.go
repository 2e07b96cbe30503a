package proc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/pilot/status"
)

// SVID gets a workload certificate for ns/sa from pilot: a bootstrap token,
// then a CSR over TLS, as a sidecar's certclient does.
func (p *PilotProcess) SVID(t testing.TB, ns, sa string) tls.Certificate {
	t.Helper()
	return RequestSVID(t, p.XDSTLSAddr(), p.CARoot(t), MintToken(t, p, ns, sa, 0), "cluster.local", ns, sa)
}

// CARoot is the trust bundle pilot wrote (CARootFile), waiting for it.
func (p *PilotProcess) CARoot(t testing.TB) *bundle.Bundle {
	t.Helper()
	var b []byte
	for deadline := time.Now().Add(PilotStartTimeout); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if b, err = os.ReadFile(p.CARootFile()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pilot's CA root: %v", err)
		}
	}
	bd, err := bundle.Parse(b)
	if err != nil {
		t.Fatalf("pilot's CA root %s: %v", p.CARootFile(), err)
	}
	return bd
}

// RequestSVID makes a P-256 key and a CSR for spiffe://td/ns/<ns>/sa/<sa>,
// sends it with token to pilot's CSR service at tlsAddr (pilot verified against
// roots as spiffe://td/weft/pilot) and returns the certificate with its key.
func RequestSVID(t testing.TB, tlsAddr string, roots *bundle.Bundle, token, td, ns, sa string) tls.Certificate {
	t.Helper()
	id, err := spiffe.Workload(td, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	chain, key := Enroll(t, tlsAddr, ClientTLS(t, roots, td, nil), token, id.String(), 10*time.Second)
	out := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		out.Certificate = append(out.Certificate, c.Raw)
	}
	return out
}

// Enroll is a sidecar's first CSR: it makes a P-256 key and a CSR for the
// SPIFFE ID id, sends it with token to pilot's CSR service at tlsAddr over
// creds (how the caller verifies pilot), waiting at most timeout, and returns
// the chain pilot signed (leaf first) with the key.
func Enroll(t testing.TB, tlsAddr string, creds credentials.TransportCredentials, token, id string, timeout time.Duration) ([]*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(tlsAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	chain, err := csrrpc.Sign(ctx, cc, csr, token)
	if err != nil {
		t.Fatalf("CSR for %s: %v", id, err)
	}
	return chain, key
}

// ClientTLS are the credentials of a client of pilot's TLS listener: pilot
// verified against roots as spiffe://td/weft/pilot (not by host name), cert
// presented when not nil.
func ClientTLS(t testing.TB, roots *bundle.Bundle, td string, cert *tls.Certificate) credentials.TransportCredentials {
	t.Helper()
	pilotID, err := spiffe.Pilot(td)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain and the SPIFFE ID are checked in VerifyPeerCertificate.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			chain := make([]*x509.Certificate, 0, len(raw))
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				chain = append(chain, c)
			}
			got, err := roots.Verify(chain, time.Now())
			if err != nil {
				return err
			}
			if got != pilotID {
				return fmt.Errorf("pilot presented %s, want %s", got, pilotID)
			}
			return nil
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return credentials.NewTLS(cfg)
}

// ProxyStatus reads pilot's status of proxy id (GET /apis/status/v1/proxies/id);
// an error when pilot has none.
func (p *PilotProcess) ProxyStatus(id string) (status.ProxyStatus, error) {
	var ps status.ProxyStatus
	hc := httpClient(p.Netns, 5*time.Second)
	resp, err := hc.Get(p.URL() + "/apis/status/v1/proxies/" + url.PathEscape(id))
	if err != nil {
		return ps, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ps, fmt.Errorf("proxy %s: %s", id, resp.Status)
	}
	return ps, json.NewDecoder(resp.Body).Decode(&ps)
}

// RSS is the process's resident set size, from /proc/<pid>/status (VmRSS).
func (p *Proc) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", p.Cmd.Process.Pid)
}
