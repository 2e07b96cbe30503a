// Package bundle is the mesh's trust bundle: an immutable set of CA roots, and
// X.509-SVID verification against it at a given time (go-spiffe's rules).
package bundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// MaxRoots bounds the roots of one bundle: a rotation needs two; more than a
// handful is a mistake, and every handshake walks them.
const MaxRoots = 16

// MaxPEMBytes bounds what Parse reads: MaxRoots certificates of up to 4 KiB
// each in PEM (a P-256 root is about 700 bytes).
const MaxPEMBytes = MaxRoots * 6 << 10

// MaxChain bounds the chain Verify accepts (leaf + intermediates).
const MaxChain = 8

// Bundle is immutable once built.
type Bundle struct {
	roots []*x509.Certificate // distinct by DER, in the order given
	pem   []byte
	pool  *x509.CertPool
}

// New builds a bundle of roots (at least one, at most MaxRoots; duplicates by
// DER are dropped). Every root must be a CA certificate.
func New(roots ...*x509.Certificate) (*Bundle, error) {
	b := &Bundle{pool: x509.NewCertPool()}
	for i, r := range roots {
		if r == nil {
			return nil, fmt.Errorf("bundle: root %d: nil", i)
		}
		if !r.IsCA || !r.BasicConstraintsValid {
			return nil, fmt.Errorf("bundle: root %d (subject %q, serial %x): not a CA certificate", i, r.Subject, r.SerialNumber)
		}
		if b.has(r) {
			continue
		}
		b.roots = append(b.roots, r)
	}
	if len(b.roots) == 0 {
		return nil, errors.New("bundle: no roots")
	}
	if len(b.roots) > MaxRoots {
		return nil, fmt.Errorf("bundle: %d roots, over the bound of %d", len(b.roots), MaxRoots)
	}
	var buf bytes.Buffer
	for _, r := range b.roots {
		b.pool.AddCert(r)
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})
	}
	b.pem = buf.Bytes()
	return b, nil
}

func (b *Bundle) has(c *x509.Certificate) bool {
	for _, r := range b.roots {
		if bytes.Equal(r.Raw, c.Raw) {
			return true
		}
	}
	return false
}

// Parse reads PEM CERTIFICATE blocks (at most MaxPEMBytes, at most MaxRoots
// certificates). Any other block or trailing non-PEM data is refused.
func Parse(pemBytes []byte) (*Bundle, error) {
	if len(pemBytes) > MaxPEMBytes {
		return nil, fmt.Errorf("bundle: %d bytes, over the bound of %d", len(pemBytes), MaxPEMBytes)
	}
	roots, rest, err := ParseCertificates(pemBytes, MaxRoots)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("bundle: %d bytes of trailing data that is not PEM", len(rest))
	}
	return New(roots...)
}

// ParseCertificates reads the PEM blocks of pemBytes up to the first non-PEM
// data, which it returns as rest: each must be a CERTIFICATE, at most limit
// of them (refused before parsing the one past). The caller bounds pemBytes and
// decides on rest and on no certificates at all.
func ParseCertificates(pemBytes []byte, limit int) (certs []*x509.Certificate, rest []byte, err error) {
	rest = pemBytes
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return certs, rest, nil
		}
		if blk.Type != "CERTIFICATE" {
			return nil, nil, fmt.Errorf("block %d: PEM type %q, want CERTIFICATE", len(certs), blk.Type)
		}
		if len(certs) == limit {
			return nil, nil, fmt.Errorf("more than %d certificates", limit)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate %d: %w", len(certs), err)
		}
		certs = append(certs, c)
	}
}

// PEM is the roots as PEM CERTIFICATE blocks (the caller must not modify it).
func (b *Bundle) PEM() []byte { return b.pem }

// Roots returns a copy of the roots slice (the certificates are shared).
func (b *Bundle) Roots() []*x509.Certificate { return append([]*x509.Certificate(nil), b.roots...) }

// Pool is a pool of the roots (shared: callers must not add to it).
func (b *Bundle) Pool() *x509.CertPool { return b.pool }

// Union is the roots of b then those of o not already in b.
func (b *Bundle) Union(o *Bundle) (*Bundle, error) {
	return New(append(b.Roots(), o.roots...)...)
}

// Equal reports whether b and o hold the same roots in any order.
func (b *Bundle) Equal(o *Bundle) bool {
	if b == nil || o == nil {
		return b == o
	}
	if len(b.roots) != len(o.roots) {
		return false
	}
	for _, r := range o.roots {
		if !b.has(r) {
			return false
		}
	}
	return true
}

// Verify checks an X.509-SVID chain (leaf first) at now against the roots with
// go-spiffe's SVID rules (exactly one URI SAN, no CA leaf, no cert/CRL signing
// leaf, chain to a root, every certificate valid at now); returns the leaf's ID.
// The roots are trusted for any trust domain: a Weft mesh has one.
func (b *Bundle) Verify(chain []*x509.Certificate, now time.Time) (spiffeid.ID, error) {
	if len(chain) == 0 {
		return spiffeid.ID{}, errors.New("verify SVID: empty chain")
	}
	if len(chain) > MaxChain {
		return spiffeid.ID{}, fmt.Errorf("verify SVID: chain of %d certificates, over the bound of %d", len(chain), MaxChain)
	}
	if now.IsZero() {
		return spiffeid.ID{}, errors.New("verify SVID: zero time")
	}
	id, _, err := x509svid.Verify(chain, source{b}, x509svid.WithTime(now))
	if err != nil {
		return id, fmt.Errorf("verify SVID serial %x: %w", chain[0].SerialNumber, err)
	}
	return id, nil
}

// source hands the roots to go-spiffe for whatever trust domain the leaf names.
type source struct{ b *Bundle }

func (s source) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	return x509bundle.FromX509Authorities(td, s.b.roots), nil
}
