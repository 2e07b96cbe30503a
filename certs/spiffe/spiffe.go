// Package spiffe builds and reads the SPIFFE IDs Weft issues: workloads
// (spiffe://<td>/ns/<ns>/sa/<sa>), pilot (spiffe://<td>/weft/pilot) and the
// manifest publisher (spiffe://<td>/weft/publisher).
package spiffe

import (
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Paths of pilot's own identities. No workload path starts with /weft/ (a
// workload path always starts with /ns/), so they cannot collide.
const (
	PublisherPath = "/weft/publisher"
	PilotPath     = "/weft/pilot"
)

// MaxNameLen bounds a namespace or service account: a DNS-1123 label.
const MaxNameLen = 63

// ValidName reports why s is not a DNS-1123 label (lower-case alphanumerics and
// '-', starting and ending alphanumeric, at most MaxNameLen), or nil. Kubernetes
// namespaces and service accounts follow this rule, so IDs stay portable.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%d characters, over %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return fmt.Errorf("%q is not a DNS-1123 label (a-z, 0-9, '-' inside)", s)
		}
	}
	return nil
}

// Workload is the ID of service account sa in namespace ns.
func Workload(trustDomain, ns, sa string) (spiffeid.ID, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust domain %q: %w", trustDomain, err)
	}
	if err := ValidName(ns); err != nil {
		return spiffeid.ID{}, fmt.Errorf("namespace: %w", err)
	}
	if err := ValidName(sa); err != nil {
		return spiffeid.ID{}, fmt.Errorf("service account: %w", err)
	}
	return spiffeid.FromSegments(td, "ns", ns, "sa", sa)
}

// Publisher is the ID of pilot's manifest-signing key.
func Publisher(trustDomain string) (spiffeid.ID, error) { return weft(trustDomain, PublisherPath) }

// Pilot is the ID of pilot's TLS serving certificate.
func Pilot(trustDomain string) (spiffeid.ID, error) { return weft(trustDomain, PilotPath) }

func weft(trustDomain, path string) (spiffeid.ID, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("trust domain %q: %w", trustDomain, err)
	}
	return spiffeid.FromPath(td, path)
}

// ParseWorkload returns the namespace and service account of a workload ID,
// or an error naming the ID when it is not of the form /ns/<ns>/sa/<sa>.
func ParseWorkload(id spiffeid.ID) (ns, sa string, err error) {
	parts := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" {
		return "", "", fmt.Errorf("SPIFFE ID %s: not a workload ID (want spiffe://<td>/ns/<ns>/sa/<sa>)", id)
	}
	if err := ValidName(parts[1]); err != nil {
		return "", "", fmt.Errorf("SPIFFE ID %s: namespace: %w", id, err)
	}
	if err := ValidName(parts[3]); err != nil {
		return "", "", fmt.Errorf("SPIFFE ID %s: service account: %w", id, err)
	}
	return parts[1], parts[3], nil
}

// FromCert returns the SPIFFE ID of c: exactly one URI SAN, a SPIFFE ID.
func FromCert(c *x509.Certificate) (spiffeid.ID, error) {
	switch len(c.URIs) {
	case 0:
		return spiffeid.ID{}, fmt.Errorf("certificate serial %x: no URI SAN", c.SerialNumber)
	case 1:
	default:
		return spiffeid.ID{}, fmt.Errorf("certificate serial %x: %d URI SANs, want exactly one", c.SerialNumber, len(c.URIs))
	}
	id, err := spiffeid.FromURI(c.URIs[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("certificate serial %x: URI SAN %q: %w", c.SerialNumber, c.URIs[0], err)
	}
	return id, nil
}
