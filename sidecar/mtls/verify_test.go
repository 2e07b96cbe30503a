package mtls

import (
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// TestVerifyTable runs the pure check line by line: each refusal at its bound
// and one past it.
func TestVerifyTable(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "root"), mtlstest.NewCA(t, "other")
	now := time.Now().Truncate(time.Second)
	own := ca.Issue(t, "spiffe://cluster.local/ns/shop/sa/productpage", now.Add(-time.Hour), now.Add(3*time.Hour))
	peer := ca.Issue(t, "spiffe://cluster.local/ns/shop/sa/reviews", now.Add(-time.Hour), now.Add(3*time.Hour))
	shortPeer := ca.Issue(t, "spiffe://cluster.local/ns/shop/sa/reviews", now.Add(-time.Hour), now.Add(30*time.Minute))
	stranger := other.Issue(t, "spiffe://cluster.local/ns/shop/sa/reviews", now.Add(-time.Hour), now.Add(3*time.Hour))
	trust := func(validity time.Duration, revoked ...*svid.SVID) *Trust {
		var serials []*big.Int
		for _, s := range revoked {
			serials = append(serials, s.Cert.Leaf.SerialNumber)
		}
		tr, err := NewTrust(ca.Bundle(t), ca.CRL(t, 1, now.Add(-time.Minute), validity, serials...))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	fresh, revokedPeer, long := trust(time.Hour), trust(time.Hour, peer), trust(12*time.Hour)
	next := fresh.CRL().NextUpdate()
	grace := time.Hour
	reviews := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews")
	ratings := spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/ratings")
	chain := func(s *svid.SVID) []*x509.Certificate { return []*x509.Certificate{s.Cert.Leaf} }
	for _, tc := range []struct {
		name     string
		own      *svid.SVID
		trust    *Trust
		chain    []*x509.Certificate
		now      time.Time
		expected []spiffeid.ID
		want     string // result label; "" accepted
	}{
		{"server accepts a mesh peer", own, fresh, chain(peer), now, nil, ""},
		{"client accepts an expected server", own, fresh, chain(peer), now, []spiffeid.ID{ratings, reviews}, ""},
		{"no own certificate", nil, fresh, chain(peer), now, nil, ResultNoCertificate},
		{"own certificate at NotAfter", own, long, chain(peer), own.NotAfter, nil, ""},
		{"own certificate 1ns past NotAfter", own, long, chain(peer), own.NotAfter.Add(1), nil, ResultCertificateExpired},
		{"own certificate before NotBefore", own, fresh, chain(peer), own.NotBefore.Add(-1), nil, ResultCertificateExpired},
		{"no trust", own, nil, chain(peer), now, nil, ResultNoTrust},
		{"CRL lapsed, within grace", own, fresh, chain(peer), next.Add(grace), nil, ""},
		{"CRL 1ns past grace", own, fresh, chain(peer), next.Add(grace + 1), nil, ResultCRLExpired},
		{"no peer certificate", own, fresh, nil, now, nil, ResultUntrusted},
		{"peer from another CA", own, fresh, chain(stranger), now, nil, ResultUntrusted},
		{"peer revoked", own, revokedPeer, chain(peer), now, nil, ResultRevoked},
		{"server not expected", own, fresh, chain(peer), now, []spiffeid.ID{ratings}, ResultUnexpectedPeer},
		{"peer at its NotAfter", own, fresh, chain(shortPeer), shortPeer.NotAfter, nil, ""},
		{"peer 1s past its NotAfter", own, fresh, chain(shortPeer), shortPeer.NotAfter.Add(time.Second), nil, ResultUntrusted},
	} {
		p, err := verify(tc.own, tc.trust, tc.chain, tc.now, grace, tc.expected)
		got := ""
		if err != nil {
			re, ok := err.(*RefusedError)
			if !ok {
				t.Errorf("%s: %v is not a *RefusedError", tc.name, err)
				continue
			}
			got = re.Result
		}
		if got != tc.want {
			t.Errorf("%s: result %q (%v), want %q", tc.name, got, err, tc.want)
		}
		if err == nil && p.ID != reviews {
			t.Errorf("%s: peer %v, want %s", tc.name, p.ID, reviews)
		}
	}
}

func TestStatusTable(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	now := time.Now().Truncate(time.Second)
	own := ca.Issue(t, "spiffe://cluster.local/ns/shop/sa/productpage", now.Add(-time.Hour), now.Add(3*time.Hour))
	tr, err := NewTrust(ca.Bundle(t), ca.CRL(t, 4, now.Add(-time.Minute), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	next, grace := tr.CRL().NextUpdate(), time.Hour
	for _, tc := range []struct {
		name      string
		s         *svid.SVID
		ts        *trustState
		now       time.Time
		cert, crl string
		ready     bool
		lines     string
	}{
		{"nothing, mTLS not needed", nil, nil, now, CertMissing, CRLMissing, true, "certificate: missing\ncrl: missing"},
		{"nothing, mTLS needed", nil, &trustState{needed: true}, now, CertMissing, CRLMissing, false,
			"certificate: missing\ncrl: missing\nmtls: not ready: mTLS refused (no_certificate): this sidecar has no workload certificate"},
		{"all good", own, &trustState{t: tr, needed: true}, now, CertValid, CRLFresh, true,
			"certificate: valid expires-in=3h0m0s\ncrl: fresh number=4 age=1m0s next-update-in=59m0s"},
		{"CRL lapsed within grace", own, &trustState{t: tr, needed: true}, next.Add(grace), CertValid, CRLLapsed, true, ""},
		{"CRL past grace", own, &trustState{t: tr, needed: true}, next.Add(grace + 1), CertValid, CRLExpired, false, ""},
		{"CRL past grace, mTLS not needed", own, &trustState{t: tr}, next.Add(grace + 1), CertValid, CRLExpired, true, ""},
		{"certificate expired", own, &trustState{t: tr, needed: true}, own.NotAfter.Add(1), CertExpired, CRLExpired, false, ""},
	} {
		st := status(tc.s, tc.ts, tc.now, grace)
		if st.Cert != tc.cert || st.CRL != tc.crl || st.Ready != tc.ready {
			t.Errorf("%s: %+v, want cert %s crl %s ready %v", tc.name, st, tc.cert, tc.crl, tc.ready)
		}
		if tc.lines != "" && st.Lines() != tc.lines {
			t.Errorf("%s: lines\n%s\nwant\n%s", tc.name, st.Lines(), tc.lines)
		}
	}
}
