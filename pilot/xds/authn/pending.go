package authn

// Until certs/spiffe lands on main (the certs helper owns it): the same rules,
// to be replaced by spiffe.FromCert and spiffe.ParseWorkload.

import (
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

func fromCert(c *x509.Certificate) (spiffeid.ID, error) {
	id, err := x509svid.IDFromCert(c)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("certificate serial %x: %w", c.SerialNumber, err)
	}
	return id, nil
}

func parseWorkload(id spiffeid.ID) (ns, sa string, err error) {
	parts := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || parts[1] == "" || parts[3] == "" {
		return "", "", fmt.Errorf("SPIFFE ID %s: not a workload ID (want spiffe://<td>/ns/<ns>/sa/<sa>)", id)
	}
	return parts[1], parts[3], nil
}
