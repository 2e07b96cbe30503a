package revoke_test

import (
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/revoke"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newCA(t testing.TB) *ca.CA {
	t.Helper()
	c, err := ca.Open(ca.Config{Dir: t.TempDir(), TrustDomain: "td", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serial(t testing.TB) *big.Int {
	s, err := ca.Serial()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func build(t testing.TB, c *ca.CA, number int64, entries []revoke.Entry, validity time.Duration) []byte {
	t.Helper()
	cert, key := c.CRLSigner()
	der, err := revoke.Build(cert, key, number, entries, t0, validity)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestBuildParse(t *testing.T) {
	c := newCA(t)
	a, b, notListed := serial(t), serial(t), serial(t)
	der := build(t, c, 7, []revoke.Entry{{Serial: a, RevokedAt: t0, Reason: 1}, {Serial: b, RevokedAt: t0.Add(-time.Hour)}}, time.Hour)
	crl, err := revoke.Parse(der, c.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if !crl.Revoked(a) || !crl.Revoked(b) || crl.Revoked(notListed) || crl.Revoked(nil) {
		t.Fatal("Revoked is wrong")
	}
	if crl.Number() != 7 || !crl.ThisUpdate().Equal(t0) || !crl.NextUpdate().Equal(t0.Add(time.Hour)) || crl.Len() != 2 {
		t.Fatalf("number %d this %v next %v len %d", crl.Number(), crl.ThisUpdate(), crl.NextUpdate(), crl.Len())
	}
	if e := crl.Entries(); e[0].Reason != 1 || e[0].Serial.Cmp(a) != 0 {
		t.Fatalf("entries %+v", e)
	}
	if !crl.Issuer().Equal(c.Signer()) {
		t.Fatal("issuer")
	}
	viaPEM, err := revoke.ParsePEM(revoke.PEM(der), c.Bundle())
	if err != nil || viaPEM.Number() != 7 {
		t.Fatalf("PEM: %v", err)
	}
	if allocs := testing.AllocsPerRun(100, func() { crl.Revoked(a); crl.Revoked(notListed) }); allocs != 0 {
		t.Fatalf("Revoked allocates %v times", allocs)
	}
}

func TestParseRefusals(t *testing.T) {
	c, other := newCA(t), newCA(t)
	good := build(t, c, 1, nil, time.Hour)
	fromOther := build(t, other, 1, nil, time.Hour)
	cert, key := c.CRLSigner()
	noNext, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: t0, NextUpdate: t0}, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name string
		der  []byte
		err  string
	}{
		{"from another CA", fromOther, "not signed by any root of the trust bundle"},
		{"tampered signature", tampered, "not signed by any root"},
		{"NextUpdate not after ThisUpdate", noNext, "is not after ThisUpdate"},
		{"over MaxBytes", make([]byte, revoke.MaxBytes+1), "8388609 bytes, over the bound of 8388608"},
		{"not DER", []byte("hello"), "CRL:"},
	} {
		if _, err := revoke.Parse(tc.der, c.Bundle()); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if _, err := revoke.Parse(good, nil); err == nil {
		t.Error("no bundle accepted")
	}
	// During a rotation the bundle holds both roots: a CRL of either parses.
	if err := c.StartRotation(); err != nil {
		t.Fatal(err)
	}
	if _, err := revoke.Parse(good, c.Bundle()); err != nil {
		t.Errorf("CRL of the old root during rotation: %v", err)
	}
	if _, err := revoke.Parse(build(t, c, 2, nil, time.Hour), c.Bundle()); err != nil {
		t.Errorf("CRL of the new root during rotation: %v", err)
	}
	if _, err := revoke.ParsePEM(good, c.Bundle()); err == nil || !strings.Contains(err.Error(), "no PEM block") {
		t.Errorf("DER to ParsePEM: %v", err)
	}
}

func TestEntryBounds(t *testing.T) {
	c := newCA(t)
	cert, key := c.CRLSigner()
	entries := make([]revoke.Entry, revoke.MaxEntries+1)
	for i := range entries {
		entries[i] = revoke.Entry{Serial: new(big.Int).SetUint64(uint64(i) + 1<<63), RevokedAt: t0}
	}
	if _, err := revoke.Build(cert, key, 1, entries, t0, time.Hour); err == nil || !strings.Contains(err.Error(), "100001 entries, over the bound of 100000") {
		t.Fatalf("Build of MaxEntries+1: %v", err)
	}
	if testing.Short() {
		t.Skip("MaxEntries-sized CRLs take a second")
	}
	der, err := revoke.Build(cert, key, 1, entries[:revoke.MaxEntries], t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := revoke.Parse(der, c.Bundle())
	if err != nil || crl.Len() != revoke.MaxEntries {
		t.Fatalf("Parse of MaxEntries: %v", err)
	}
	rev := make([]x509.RevocationListEntry, len(entries))
	for i, e := range entries {
		rev[i] = x509.RevocationListEntry{SerialNumber: e.Serial, RevocationTime: t0}
	}
	over, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: t0, NextUpdate: t0.Add(time.Hour), RevokedCertificateEntries: rev}, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := revoke.Parse(over, c.Bundle()); err == nil || !strings.Contains(err.Error(), "100001 entries, over the bound of 100000") {
		t.Fatalf("Parse of MaxEntries+1: %v", err)
	}
}

func TestBuildRefusals(t *testing.T) {
	c := newCA(t)
	cert, key := c.CRLSigner()
	for _, tc := range []struct {
		name     string
		number   int64
		entries  []revoke.Entry
		this     time.Time
		validity time.Duration
		err      string
	}{
		{"negative number", -1, nil, t0, time.Hour, "number -1 is negative"},
		{"zero validity", 1, nil, t0, 0, "validity 0s is not positive"},
		{"zero thisUpdate", 1, nil, time.Time{}, time.Hour, "zero thisUpdate"},
		{"nil serial", 1, []revoke.Entry{{}}, t0, time.Hour, "entry 0: serial <nil> is not positive"},
		{"bad reason", 1, []revoke.Entry{{Serial: big.NewInt(5), Reason: 7}}, t0, time.Hour, "reason 7 is not an RFC 5280 CRLReason"},
	} {
		if _, err := revoke.Build(cert, key, tc.number, tc.entries, tc.this, tc.validity); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestState(t *testing.T) {
	c := newCA(t)
	crl, err := revoke.Parse(build(t, c, 1, nil, revoke.DefaultValidity), c.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	next := t0.Add(revoke.DefaultValidity)
	g := revoke.DefaultGrace
	for _, tc := range []struct {
		now   time.Time
		grace time.Duration
		want  revoke.State
	}{
		{t0, g, revoke.Fresh},
		{next, g, revoke.Fresh},
		{next.Add(time.Nanosecond), g, revoke.Lapsed},
		{next.Add(g), g, revoke.Lapsed},
		{next.Add(g + time.Nanosecond), g, revoke.Expired},
		{next.Add(time.Nanosecond), 0, revoke.Expired},
		{next.Add(time.Nanosecond), -time.Hour, revoke.Expired},
	} {
		if got := crl.State(tc.now, tc.grace); got != tc.want {
			t.Errorf("State(next%+v, %v) = %v, want %v", tc.now.Sub(next), tc.grace, got, tc.want)
		}
	}
	if revoke.Fresh.String() != "fresh" || revoke.Lapsed.String() != "lapsed" || revoke.Expired.String() != "expired" {
		t.Error("State names")
	}
}

func FuzzParse(f *testing.F) {
	c := newCA(f)
	cert, key := c.CRLSigner()
	s, _ := ca.Serial()
	der, _ := revoke.Build(cert, key, 3, []revoke.Entry{{Serial: s, RevokedAt: t0, Reason: 4}}, t0, time.Hour)
	f.Add(der)
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00})
	b := c.Bundle()
	f.Fuzz(func(t *testing.T, in []byte) {
		crl, err := revoke.Parse(in, b)
		if err != nil {
			return
		}
		if crl.Len() > revoke.MaxEntries || !crl.NextUpdate().After(crl.ThisUpdate()) {
			t.Fatalf("accepted a CRL past its bounds: len %d", crl.Len())
		}
	})
}

func BenchmarkRevoked(b *testing.B) {
	c := newCA(b)
	entries := make([]revoke.Entry, 10_000)
	for i := range entries {
		entries[i] = revoke.Entry{Serial: serial(b), RevokedAt: t0}
	}
	crl, err := revoke.Parse(build(b, c, 1, entries, time.Hour), c.Bundle())
	if err != nil {
		b.Fatal(err)
	}
	probe := serial(b)
	b.ReportAllocs()
	for b.Loop() {
		crl.Revoked(probe)
	}
}
