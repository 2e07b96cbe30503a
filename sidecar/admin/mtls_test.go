package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
)

func mtlsManager(t *testing.T, withCert bool, needed bool) (*mtls.Manager, *mtlstest.CA) {
	t.Helper()
	ca := mtlstest.NewCA(t, "root")
	h := &svid.Holder{}
	if withCert {
		h.Store(ca.Workload(t, "cluster.local", "shop", "reviews"))
	}
	m, err := mtls.New(mtls.Config{SVID: h, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := mtls.NewTrust(ca.Bundle(t), ca.CRL(t, 3, time.Now().Add(-time.Minute), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m.SetTrust(tr, needed)
	return m, ca
}

func TestMTLSCollector(t *testing.T) {
	m, _ := mtlsManager(t, true, true)
	m.CountPlaintextRefused()
	c, err := NewMTLSCollector(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	for name, want := range map[string]float64{
		"weft_sidecar_certificate_state{state=valid}":                     1,
		"weft_sidecar_certificate_state{state=expired}":                   0,
		"weft_sidecar_crl_state{state=fresh}":                             1,
		"weft_sidecar_crl_state{state=expired}":                           0,
		"weft_sidecar_mtls_plaintext_refused_total":                       1,
		"weft_sidecar_mtls_plaintext_accepted_total":                      0,
		"weft_sidecar_mtls_handshakes_total{result=ok}{side=server}":      0,
		"weft_sidecar_mtls_handshakes_total{result=revoked}{side=client}": 0,
		"weft_sidecar_mtls_connections_closed_total{reason=revoked}":      0,
		"weft_sidecar_mtls_connections_closed_total{reason=untrusted}":    0,
		"weft_sidecar_mtls_connections":                                   0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if e := got["weft_sidecar_certificate_expiry_seconds"]; e < 23*3600 || e > 24*3600 {
		t.Errorf("certificate expiry %vs, want about a day", e)
	}
	if a := got["weft_sidecar_crl_age_seconds"]; a < 59 || a > 120 {
		t.Errorf("CRL age %vs, want about a minute", a)
	}
	if _, err := NewMTLSCollector(nil, nil); err == nil {
		t.Error("a collector without a manager was accepted")
	}
}

func TestReadinessShowsIdentity(t *testing.T) {
	rt := &fakeRuntime{}
	rt.d.Store(activeDump())
	for _, tc := range []struct {
		name         string
		cert, needed bool
		code         int
		contains     []string
	}{
		{"certificate and CRL", true, true, http.StatusOK, []string{"ready", "certificate: valid expires-in=", "crl: fresh number=3 age="}},
		{"no certificate, mTLS needed", false, true, http.StatusServiceUnavailable, []string{"certificate: missing", "mtls: not ready", "no workload certificate"}},
		{"no certificate, mTLS not needed", false, false, http.StatusOK, []string{"certificate: missing"}},
	} {
		m, _ := mtlsManager(t, tc.cert, tc.needed)
		a, err := New(Config{Logger: hclog.NewNullLogger(), Runtime: rt, Gatherer: prometheus.NewRegistry(), MTLS: m})
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, a.ReadyHandler(), "/healthz/ready")
		if code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.code)
		}
		if first, _, _ := strings.Cut(body, "\n"); (first == "ready") != (code == http.StatusOK) {
			t.Errorf("%s: %d with first line %q", tc.name, code, first)
		}
		for _, s := range tc.contains {
			if !strings.Contains(body, s) {
				t.Errorf("%s: body %q lacks %q", tc.name, body, s)
			}
		}
	}
}
