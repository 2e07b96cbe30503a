package svid

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

func TestMarshalParse(t *testing.T) {
	k := newKey(t)
	s, err := New([]*x509.Certificate{leaf(t, k, "spiffe://td/ns/a/sa/b")}, k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || !got.NotAfter.Equal(s.NotAfter) || !bytes.Equal(got.Cert.Certificate[0], s.Cert.Certificate[0]) ||
		!k.PublicKey.Equal(got.Cert.PrivateKey.(crypto.Signer).Public()) {
		t.Fatalf("round trip: %+v", got)
	}
	other := newKey(t)
	od, _ := x509.MarshalPKCS8PrivateKey(other)
	certPEM := b[:bytes.Index(b, []byte("-----BEGIN PRIVATE KEY"))]
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: od})
	var many []byte
	for range MaxChain + 1 {
		many = append(many, certPEM...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "no PRIVATE KEY"},
		{"no key", certPEM, "no PRIVATE KEY"},
		{"no certificate", keyPEM, "empty certificate chain"},
		{"another key", append(append([]byte{}, certPEM...), keyPEM...), "does not match"},
		{"two keys", append(append([]byte{}, b...), keyPEM...), "unexpected PEM block"},
		{"certificate after the key", append(append([]byte{}, b...), certPEM...), "unexpected PEM block"},
		{"other block", append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), b...), "unexpected PEM block"},
		{"trailing data", append(append([]byte{}, b...), "junk"...), "trailing data"},
		{"at MaxChain + 1 certificates", many, "more than 8 certificates"},
		{"past MaxFileBytes", make([]byte, MaxFileBytes+1), "over the bound"},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	// MaxChain certificates are accepted by the parser (New then checks them).
	if _, err := Parse(append(append([]byte{}, many[:len(certPEM)*MaxChain]...), b[len(certPEM):]...)); err != nil {
		t.Errorf("MaxChain certificates: %v", err)
	}
	if len(b) > MaxFileBytes {
		t.Errorf("a one-certificate file is %d bytes, over MaxFileBytes", len(b))
	}
}
