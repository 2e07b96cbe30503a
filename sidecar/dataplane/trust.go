package dataplane

import (
	"fmt"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Trust is the configuration's trust material (SDS secret ROOTCA: the bundle and
// the CRL verified against it); nil when the snapshot carries none.
func (c *Config) Trust() *mtls.Trust { return c.trust }

// NeedsMTLS says the configuration has mTLS chains or clusters: readiness then
// requires a valid certificate and a CRL within its grace.
func (c *Config) NeedsMTLS() bool { return c.needsMTLS }

// compileTrust parses the ROOTCA secret, if any: the bundle, then the CRL,
// whose signature must verify against a root of that bundle.
func compileTrust(secrets map[string]any) (*mtls.Trust, error) {
	v, ok := secrets[xdsresource.RootCASecret]
	if !ok {
		return nil, nil
	}
	s, ok := v.(*xdsresource.Secret)
	if !ok {
		return nil, fmt.Errorf("%w: secret %q: value is %T, want *xdsresource.Secret", ErrInvalid, xdsresource.RootCASecret, v)
	}
	b, err := bundle.Parse(s.TrustedCA)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %q: validation_context.trusted_ca: %v", ErrInvalid, s.Name, err)
	}
	crl, err := revoke.ParsePEM(s.CRL, b)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %q: validation_context.crl: %v", ErrInvalid, s.Name, err)
	}
	t, err := mtls.NewTrust(b, crl)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %q: %v", ErrInvalid, s.Name, err)
	}
	return t, nil
}

// needTrust refuses a TLS chain or cluster whose validation secret is absent:
// an mTLS policy without trust material would refuse every handshake unnoticed.
func (cfg *Config) needTrust(kind, name, field, secret string) error {
	cfg.needsMTLS = true
	if cfg.trust == nil {
		return fmt.Errorf("%w: %s %q: %s: secret %q not found", ErrInvalid, kind, name, field, secret)
	}
	return nil
}

// upstreamTLS builds a TLS cluster's mtls.Upstream.
func (cfg *Config) upstreamTLS(xc *xdsresource.Cluster) (*mtls.Upstream, error) {
	if xc.TLS == nil {
		return nil, nil
	}
	if err := cfg.needTrust("cluster", xc.Name, "transport_socket...validation_context_sds_secret_config", xc.TLS.ValidationSecret); err != nil {
		return nil, err
	}
	u, err := mtls.NewUpstream(xc.TLS.SNI, xc.TLS.SANs, xc.TLS.ALPN)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster %q: transport_socket: %v", ErrInvalid, xc.Name, err)
	}
	return u, nil
}
