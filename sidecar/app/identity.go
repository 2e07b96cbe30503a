package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/sidecar/certclient"
	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// identity is the sidecar's workload certificate: obtained and renewed by
// certclient into holder, and the mTLS configuration of the xDS stream.
type identity struct {
	client *certclient.Client
	xdsTLS *tls.Config
}

// newIdentity builds the certificate client when s has a token file; nil
// without one (no identity: plaintext xDS, an empty holder, no mTLS).
// delivered is the trust bundle pilot last delivered (nil while none); with
// --ca-root it verifies pilot, so a rotated root is trusted without a restart.
func newIdentity(s *render.Settings, holder *svid.Holder, log hclog.Logger, reg prometheus.Registerer,
	delivered func() *bundle.Bundle) (*identity, error) {
	if !s.Identity() {
		return nil, nil
	}
	roots, err := certclient.LoadRootFile(s.CARoot)
	if err != nil {
		return nil, err
	}
	trust := roots.Union(delivered)
	pilotID, err := spiffe.Pilot(s.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("pilot SPIFFE ID: %w", err)
	}
	// Persisted, a restart with pilot away keeps mTLS until NotAfter
	// (certclient/persist.go); --certificate-in-memory-only gives that up.
	stateDir := s.StateDir
	if s.CertificateInMemoryOnly && stateDir != "" {
		removed, err := certclient.RemovePersisted(stateDir)
		if err != nil {
			return nil, err
		}
		if removed {
			log.Info("removed the workload certificate an earlier run persisted (--certificate-in-memory-only)", "dir", stateDir)
		}
		stateDir = ""
	}
	cc, err := certclient.New(certclient.Config{Holder: holder, TrustDomain: s.TrustDomain, Namespace: s.Node.Namespace,
		ServiceAccount: s.Node.ServiceAccount, TokenFile: s.TokenFile, Trust: trust, Servers: s.Pilot, Logger: log, Registerer: reg,
		StateDir: stateDir})
	if err != nil {
		return nil, err
	}
	return &identity{client: cc, xdsTLS: certclient.PilotTLS(pilotID, trust, holder.GetClientCertificate, time.Now)}, nil
}

// waitCertificate returns once holder has a certificate, or ctx's error: the
// xDS stream to pilot needs one (mTLS), while routing may already serve the
// last-known-good.
func waitCertificate(ctx context.Context, holder *svid.Holder) error {
	for {
		ch := holder.Changed()
		if holder.Load() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// identityLog says in the start-up line how the sidecar talks to pilot.
func identityLog(s *render.Settings) string {
	if !s.Identity() {
		return "none (plaintext xDS, no mTLS)"
	}
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s (mTLS to pilot)", s.TrustDomain, s.Node.Namespace, s.Node.ServiceAccount)
}

// deliveredBundle is the trust bundle of the active configuration's ROOTCA
// (nil while none, or without mTLS): pilot is verified against --ca-root and
// it, so a root pilot rotated to is trusted from its next push.
func deliveredBundle(mt *mtls.Manager) func() *bundle.Bundle {
	if mt == nil {
		return nil
	}
	return func() *bundle.Bundle {
		if t := mt.Trust(); t != nil {
			return t.Bundle()
		}
		return nil
	}
}
