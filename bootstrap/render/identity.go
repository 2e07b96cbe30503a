package render

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/token"
)

// Identity reports whether the sidecar gets a workload certificate (a token
// file is given).
func (s *Settings) Identity() bool { return s.TokenFile != "" }

// checkIdentity checks the identity settings that need no file.
func (s *Settings) checkIdentity() error {
	if s.TrustDomain == "" {
		s.TrustDomain = DefaultTrustDomain
	}
	// A bare name: TrustDomainFromString also takes "spiffe://name".
	if td, err := spiffeid.TrustDomainFromString(s.TrustDomain); err != nil || td.Name() != s.TrustDomain {
		return fmt.Errorf("trust-domain: %q is not a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')", s.TrustDomain)
	}
	// Without a token file, ca-root still decides whom manifests are trusted
	// from (publishers the mesh CA certifies), so it is allowed alone.
	if s.TokenFile != "" && s.CARoot == "" {
		return errors.New("ca-root: required with token-file (it verifies pilot)")
	}
	if s.CertificateInMemoryOnly && s.TokenFile == "" {
		return errors.New("certificate-in-memory-only: only with token-file (without it the sidecar has no workload certificate)")
	}
	return nil
}

// checkIdentityFiles checks the token file (exists, not empty, at most
// token.MaxBytes) and the CA roots (at most MaxCARootBytes, a bundle).
func (s *Settings) checkIdentityFiles(readFile func(string) ([]byte, error)) error {
	if s.TokenFile != "" {
		tok, err := readFile(s.TokenFile)
		switch {
		case err != nil:
			return fmt.Errorf("token-file: %v", err)
		case len(tok) > token.MaxBytes:
			return fmt.Errorf("token-file %s: %d bytes, limit %d", s.TokenFile, len(tok), token.MaxBytes)
		case len(bytes.TrimSpace(tok)) == 0:
			return fmt.Errorf("token-file %s: empty", s.TokenFile)
		}
	}
	if s.CARoot == "" {
		return nil
	}
	pem, err := readFile(s.CARoot)
	switch {
	case err != nil:
		return fmt.Errorf("ca-root: %v", err)
	case len(pem) > MaxCARootBytes:
		return fmt.Errorf("ca-root %s: %d bytes, limit %d", s.CARoot, len(pem), MaxCARootBytes)
	}
	if _, err := bundle.Parse(pem); err != nil {
		return fmt.Errorf("ca-root %s: %v", s.CARoot, err)
	}
	return nil
}
