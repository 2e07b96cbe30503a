package certclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
)

// PilotTLS is the client TLS configuration for pilot's TLS port (CSRs and
// xDS): TLS 1.3; pilot's chain verified at now() against trust() with SPIFFE
// X.509-SVID rules and its ID required to be pilotID (there are no DNS names
// to check: the address may be anything the operator reaches pilot by).
// clientCert, if not nil, supplies the client certificate for each handshake
// (svid.Holder.GetClientCertificate: a renewal is used on the next
// reconnect); nil sends none (the token-authenticated first CSR).
func PilotTLS(pilotID spiffeid.ID, trust func() (*bundle.Bundle, error),
	clientCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error), now func() time.Time) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Verification is VerifyConnection's: SPIFFE IDs, not host names.
		InsecureSkipVerify:   true, //nolint:gosec // verified below
		GetClientCertificate: clientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyPilot(cs.PeerCertificates, pilotID, trust, now())
		},
	}
}

// VerifyPilot checks pilot's chain (leaf first) at now.
func VerifyPilot(chain []*x509.Certificate, pilotID spiffeid.ID, trust func() (*bundle.Bundle, error), now time.Time) error {
	if len(chain) == 0 {
		return fmt.Errorf("pilot presented no certificate (want %s)", pilotID)
	}
	b, err := trust()
	if err != nil {
		return fmt.Errorf("verifying pilot: trust roots: %w", err)
	}
	id, err := b.Verify(chain, now)
	if err != nil {
		return fmt.Errorf("verifying pilot (want %s, serial %s): %w", pilotID, chain[0].SerialNumber, err)
	}
	if id != pilotID {
		return fmt.Errorf("verifying pilot: certificate serial %s is %s, want %s", chain[0].SerialNumber, id, pilotID)
	}
	return nil
}

// RootFile is the --ca-root file, re-read on every Load so a root pilot adds
// to it (rotation) is trusted without a restart; a file that stops parsing
// keeps the last good bundle and reports why.
type RootFile struct {
	Path string

	mu  sync.Mutex // guards raw and b; held around the cache only, not the read
	raw []byte
	b   *bundle.Bundle
}

// MaxRootFileBytes bounds the --ca-root file: what bundle.Parse reads.
const MaxRootFileBytes = bundle.MaxPEMBytes

// LoadRootFile reads and parses path once, so a bad --ca-root fails the start.
func LoadRootFile(path string) (*RootFile, error) {
	r := &RootFile{Path: path}
	if _, err := r.Load(); err != nil {
		return nil, err
	}
	return r, nil
}

// Load returns the bundle in the file now, or the last good one with the
// error when the file cannot be read or parsed.
func (r *RootFile) Load() (*bundle.Bundle, error) {
	raw, rerr := os.ReadFile(r.Path)
	if rerr == nil && len(raw) > MaxRootFileBytes {
		rerr = fmt.Errorf("%d bytes, limit %d", len(raw), MaxRootFileBytes)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rerr == nil && r.b != nil && bytes.Equal(raw, r.raw) {
		return r.b, nil
	}
	var err error
	if rerr != nil {
		err = fmt.Errorf("ca-root %s: %w", r.Path, rerr)
	} else if b, perr := bundle.Parse(raw); perr != nil {
		err = fmt.Errorf("ca-root %s: %w", r.Path, perr)
	} else {
		r.raw, r.b = raw, b
		return b, nil
	}
	if r.b == nil {
		return nil, err
	}
	return r.b, nil // the last good roots; the file's trouble is the operator's to see in the log
}

// Union returns a Trust function that adds extra() (the bundle pilot last
// delivered; nil while none) to the roots of r.
func (r *RootFile) Union(extra func() *bundle.Bundle) func() (*bundle.Bundle, error) {
	return func() (*bundle.Bundle, error) {
		b, err := r.Load()
		if err != nil {
			return nil, err
		}
		if extra == nil {
			return b, nil
		}
		e := extra()
		if e == nil {
			return b, nil
		}
		u, err := b.Union(e)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("ca-root %s with the delivered trust bundle", r.Path), err)
		}
		return u, nil
	}
}
