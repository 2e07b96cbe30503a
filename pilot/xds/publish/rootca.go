package publish

import (
	"fmt"
	"maps"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// TrustSource is what sidecars are sent as the SDS Secret ROOTCA: the trust
// bundle and the CRL (pilot/ca.Service). TrustChanged is closed (and replaced)
// on every change, so every stream can wait on it.
type TrustSource interface {
	Trust() *ca.Trust
	TrustChanged() <-chan struct{}
}

// rootCA is the ROOTCA resource of one Trust version. Built once per version
// and shared by every stream (resources are immutable).
type rootCA struct {
	version string
	res     snapshot.Resource
	err     error
}

// rootCACache builds the ROOTCA resource of the current Trust, once per version.
type rootCACache struct {
	src TrustSource // nil: pilot sends no ROOTCA

	mu     sync.Mutex // guards cur and logged
	cur    *rootCA
	logged *rootCA // the failed one last logged
}

// get returns the ROOTCA of the current Trust (nil when there is none).
func (c *rootCACache) get() *rootCA {
	if c.src == nil {
		return nil
	}
	t := c.src.Trust()
	if t == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.version == t.Version {
		return c.cur
	}
	rc := &rootCA{version: t.Version}
	rc.res, rc.err = rootCAResource(t)
	c.cur = rc
	return rc
}

// rootCAResource is the Wire shape of issue #9: Secret{name: ROOTCA,
// validation_context{trusted_ca{inline_bytes: bundle PEM}, crl{inline_bytes:
// CRL PEM}}}.
func rootCAResource(t *ca.Trust) (snapshot.Resource, error) {
	if len(t.BundlePEM) == 0 || len(t.CRLPEM) == 0 {
		return snapshot.Resource{}, fmt.Errorf("trust version %q: bundle and CRL required", t.Version)
	}
	vc := &tlsv3.CertificateValidationContext{TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: t.BundlePEM}},
		Crl: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: t.CRLPEM}}}
	s := &tlsv3.Secret{Name: manifest.RootCAName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}}
	r, err := snapshot.NewResource(snapshot.SecretType, manifest.RootCAName, s)
	if err != nil {
		return snapshot.Resource{}, err
	}
	if err := checkRootCA(r); err != nil {
		return snapshot.Resource{}, fmt.Errorf("trust version %q: %w", t.Version, err)
	}
	return r, nil
}

// withRootCA returns base with rc's resource among its Secrets (base itself
// when rc is nil or failed).
func withRootCA(base *snapshot.Snapshot, rc *rootCA) *snapshot.Snapshot {
	if base == nil || rc == nil || rc.err != nil {
		return base
	}
	secrets := maps.Clone(base.Resources[snapshot.SecretType])
	if secrets == nil {
		secrets = map[string]snapshot.Resource{}
	}
	secrets[manifest.RootCAName] = rc.res
	sets := make(map[string]snapshot.Set, len(base.Resources)+1)
	for t, byName := range base.Resources {
		sets[t] = snapshot.Set{Resources: byName, Version: base.Version(t)}
	}
	sets[snapshot.SecretType] = snapshot.NewSet(secrets)
	return snapshot.FromSets(base.Revision, sets)
}
