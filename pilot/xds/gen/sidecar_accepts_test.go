package gen

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/revoke"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// sidecarAccepts runs a snapshot through exactly what a Weft sidecar runs before
// activating a config: its xDS decoders, then dataplane compile. The ROOTCA
// Secret is what pilot/xds/publish adds to every sidecar snapshot (gen does
// not: the trust bundle and CRL are not the mesh's), made here from a real CA.
func sidecarAccepts(s *snapshot.Snapshot) error {
	state := map[string]map[string]any{}
	secret, err := rootCASecret()
	if err != nil {
		return err
	}
	_, v, err := xdsresource.Decode(snapshot.SecretType, secret)
	if err != nil {
		return fmt.Errorf("ROOTCA: %w", err)
	}
	state[snapshot.SecretType] = map[string]any{RootCASecretName: v}
	for _, typ := range []string{snapshot.ClusterType, snapshot.EndpointType, snapshot.LbEndpointType, snapshot.ListenerType, snapshot.RouteType, snapshot.StalenessType} {
		byName := map[string]any{}
		for name, r := range s.Resources[typ] {
			got, v, err := xdsresource.Decode(typ, r.Any)
			if err != nil {
				return fmt.Errorf("%s %q: %w", typ, name, err)
			}
			if got == "" {
				got = name // an LbEndpoint is named by its wrapper only
			}
			byName[got] = v
		}
		state[typ] = byName
	}
	if _, err := dataplane.Compile(state); err != nil {
		return fmt.Errorf("dataplane compile: %w", err)
	}
	return nil
}

var rootCA struct {
	once   sync.Once
	secret *anypb.Any
	err    error
}

// rootCASecret is a ROOTCA Secret (bundle and a fresh CRL) from a CA in a
// temporary directory, built once per test binary.
func rootCASecret() (*anypb.Any, error) {
	rootCA.once.Do(func() {
		dir, err := os.MkdirTemp("", "gen-rootca")
		if err != nil {
			rootCA.err = err
			return
		}
		defer os.RemoveAll(dir)
		c, err := ca.Open(ca.Config{Dir: dir, TrustDomain: "cluster.local"})
		if err != nil {
			rootCA.err = err
			return
		}
		issuer, key := c.CRLSigner()
		der, err := revoke.Build(issuer, key, 1, nil, time.Now(), revoke.DefaultValidity)
		if err != nil {
			rootCA.err = err
			return
		}
		rootCA.secret, rootCA.err = anypb.New(&tlsv3.Secret{Name: RootCASecretName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: c.Bundle().PEM()}},
			Crl:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: revoke.PEM(der)}},
		}}})
	})
	return rootCA.secret, rootCA.err
}

// TestSidecarAccepts: every golden sidecar snapshot is one our own sidecar
// accepts, so gen never emits what a Weft sidecar would NACK.
func TestSidecarAccepts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.input.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		m, ps := meshFromFile(t, f)
		for _, p := range ps {
			if !p.Registers() {
				continue
			}
			if err := sidecarAccepts(mustProxy(t, m, p)); err != nil {
				t.Errorf("%s %s: %v", f, p.ID, err)
			}
		}
	}
}
