package ca

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/pilot/api"
)

func do(t *testing.T, srv *httptest.Server, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decoding the answer: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func TestAdminAPI(t *testing.T) {
	clk := &clock{t: time.Now().Truncate(time.Second)}
	s := newService(t, t.TempDir(), func(c *ServiceConfig) { c.Now = clk.Now })
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	var tr TokenResponse
	if code := do(t, srv, "POST", Prefix+"tokens", `{"namespace":"shop","serviceAccount":"reviews","ttl":"168h"}`, &tr); code != http.StatusCreated {
		t.Fatalf("token at MaxTTL: %d", code)
	}
	c, err := token.Verify(tr.Token, s.TokenPublicKey(), "cluster.local", clk.Now())
	if err != nil || c.TTL() != token.MaxTTL || tr.SPIFFEID != reviews || !tr.ExpiresAt.Equal(clk.Now().Add(token.MaxTTL)) {
		t.Fatalf("token %+v: %v", tr, err)
	}
	if code := do(t, srv, "POST", Prefix+"tokens", `{"namespace":"shop","serviceAccount":"reviews"}`, &tr); code != http.StatusCreated {
		t.Fatalf("default ttl: %d", code)
	}
	if c, _ := token.Verify(tr.Token, s.TokenPublicKey(), "cluster.local", clk.Now()); c.TTL() != token.DefaultTTL {
		t.Fatalf("default ttl %v", c.TTL())
	}
	for _, tc := range []struct {
		body string
		code int
		msgs []string
	}{
		{`{"namespace":"shop","serviceAccount":"reviews","ttl":"168h0m1s"}`, 400, []string{"ttl: 168h0m1s is over the bound of 168h0m0s"}},
		{`{"namespace":"Shop","serviceAccount":"re_views","ttl":"x"}`, 400, []string{"namespace: \"Shop\" is not a DNS-1123 label", "serviceAccount: \"re_views\"", "ttl: \"x\" is not a duration"}},
		{`{"namespace":"shop","serviceAccount":"reviews","ttl":"-1h"}`, 400, []string{"ttl: -1h0m0s is not positive"}},
		{`{"namespace":"shop"}`, 400, []string{"serviceAccount: empty"}},
		{`{"namespace":"shop","serviceAccount":"a","extra":1}`, 400, []string{"unknown field \"extra\""}},
		{`{"namespace":"shop","serviceAccount":"a"} {}`, 400, []string{"data after the JSON object"}},
		{`{"namespace":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, 413, []string{"over the bound of 16384 bytes"}},
	} {
		var e api.ErrorResponse
		code := do(t, srv, "POST", Prefix+"tokens", tc.body, &e)
		if code != tc.code || len(e.Errors) != len(tc.msgs) {
			t.Errorf("%.60s: %d %v, want %d %v", tc.body, code, e.Errors, tc.code, tc.msgs)
			continue
		}
		for i, m := range tc.msgs {
			if !strings.Contains(e.Errors[i], m) {
				t.Errorf("%.60s: error %q, want %q", tc.body, e.Errors[i], m)
			}
		}
	}

	w := newWorkload(t)
	chain, err := s.issue(func() ([]*x509.Certificate, error) {
		return s.CA().Sign(mustCSR(t, w.csr(t, reviews)), spiffeid.RequireFromString(reviews), time.Hour)
	}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	serial := serialKey(chain[0].SerialNumber)
	var list CertificatesResponse
	if code := do(t, srv, "GET", Prefix+"certificates", "", &list); code != 200 || len(list.Certificates) != 3 {
		t.Fatalf("certificates: %d %+v", code, list)
	}
	states := map[string]string{}
	for _, c := range list.Certificates {
		states[c.SPIFFEID] = c.State
	}
	if states[reviews] != StateValid || states["spiffe://cluster.local/weft/pilot"] != StateValid || states["spiffe://cluster.local/weft/publisher"] != StateValid {
		t.Fatalf("states %v", states)
	}

	for _, tc := range []struct {
		body string
		code int
		msg  string
	}{
		{`{}`, 400, "give exactly one of serial and spiffeId"},
		{`{"serial":"ab","spiffeId":"` + reviews + `"}`, 400, "give exactly one of serial and spiffeId"},
		{`{"serial":"xyz"}`, 400, "serial \"xyz\": not a positive hexadecimal serial"},
		{`{"serial":"ab","reason":"because"}`, 400, "reason \"because\": want one of aACompromise, affiliationChanged"},
		{`{"spiffeId":"spiffe://other.td/ns/a/sa/b"}`, 400, "trust domain other.td, this CA's is cluster.local"},
		{`{"spiffeId":"not an id"}`, 400, "spiffeId \"not an id\""},
	} {
		var e api.ErrorResponse
		if code := do(t, srv, "POST", Prefix+"revocations", tc.body, &e); code != tc.code || len(e.Errors) != 1 || !strings.Contains(e.Errors[0], tc.msg) {
			t.Errorf("%s: %d %v, want %d %q", tc.body, code, e.Errors, tc.code, tc.msg)
		}
	}
	changed := s.TrustChanged()
	var rr RevocationResponse
	if code := do(t, srv, "POST", Prefix+"revocations", `{"serial":"`+strings.ToUpper(serial)+`","reason":"keyCompromise"}`, &rr); code != 200 || len(rr.Revoked) != 1 || rr.Revoked[0] != serial {
		t.Fatalf("revoke: %d %+v", code, rr)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a revocation did not change the Trust before it answered")
	}
	if !s.CRL().Revoked(chain[0].SerialNumber) || s.CRL().Number() != rr.CRLNumber {
		t.Fatal("the published CRL does not list the serial")
	}
	// Again: idempotent, same serial reported.
	if code := do(t, srv, "POST", Prefix+"revocations", `{"serial":"`+serial+`"}`, &rr); code != 200 || len(rr.Revoked) != 1 {
		t.Fatalf("revoke again: %d %+v", code, rr)
	}
	// By ID: nothing unrevoked left, so none newly revoked.
	if code := do(t, srv, "POST", Prefix+"revocations", `{"spiffeId":"`+reviews+`"}`, &rr); code != 200 || len(rr.Revoked) != 0 {
		t.Fatalf("revoke ID: %d %+v", code, rr)
	}
	do(t, srv, "GET", Prefix+"certificates", "", &list)
	for _, c := range list.Certificates {
		if c.Serial == serial && c.State != StateRevoked {
			t.Fatalf("state %s after revocation", c.State)
		}
	}

	var rot RotationResponse
	if code := do(t, srv, "DELETE", Prefix+"rotation", "", &api.ErrorResponse{}); code != http.StatusConflict {
		t.Fatalf("finish before start: %d", code)
	}
	if code := do(t, srv, "POST", Prefix+"rotation", "", &rot); code != 200 || !rot.Rotating || rot.Previous == "" {
		t.Fatalf("start: %d %+v", code, rot)
	}
	if code := do(t, srv, "POST", Prefix+"rotation", "", &api.ErrorResponse{}); code != http.StatusConflict {
		t.Fatalf("second start: %d", code)
	}
	// A live certificate from the old root blocks finish; force drops it.
	chain2, _ := s.issue(func() ([]*x509.Certificate, error) {
		return s.CA().Sign(mustCSR(t, w.csr(t, "spiffe://cluster.local/ns/shop/sa/ratings")), spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/ratings"), time.Hour)
	}, "test", false)
	s.mu.Lock()
	s.reg.issued[serialKey(chain2[0].SerialNumber)].Issuer = rot.Previous
	s.mu.Unlock()
	var e api.ErrorResponse
	if code := do(t, srv, "DELETE", Prefix+"rotation", "", &e); code != http.StatusConflict || !strings.Contains(e.Errors[0], "1 unexpired certificates from the old root") {
		t.Fatalf("finish with live old certificates: %d %v", code, e.Errors)
	}
	if code := do(t, srv, "DELETE", Prefix+"rotation?force=maybe", "", &e); code != 400 {
		t.Fatalf("force=maybe: %d", code)
	}
	if code := do(t, srv, "GET", Prefix+"rotation", "", &rot); code != 200 || rot.OldRootCertificates != 1 {
		t.Fatalf("rotation status: %d %+v", code, rot)
	}
	if code := do(t, srv, "DELETE", Prefix+"rotation?force=true", "", &rot); code != 200 || rot.Rotating {
		t.Fatalf("forced finish: %d %+v", code, rot)
	}
}
