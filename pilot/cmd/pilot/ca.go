package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/weft-mesh/weft/pilot/ca"
	"github.com/weft-mesh/weft/pilot/server"
	"github.com/weft-mesh/weft/pilot/store"
)

// caFlags are the mesh CA's flags.
type caFlags struct {
	rootCert, rootKey, chain string
	tokenKey, publisherKey   string
	sans                     sanList
	// webhookSANs are added to the serving certificate when the injection
	// webhook runs: the API server verifies it by the Service's DNS name.
	webhookSANs sanList
	maxIssued   int
}

// open is server.Config.CA: pilot/ca on the data directory, certificateTTL and
// crlValidity read from MeshConfig/default at each use.
func (f *caFlags) open(_ context.Context, env server.AuthorityEnv) (server.Authority, error) {
	certTTL, crlValidity := ca.MeshConfigDurations(env.Store)
	// Revocations live in the store (boltstore and etcdstore both keep sets),
	// so every replica on one store refuses what any of them revoked.
	sets, _ := env.Store.(store.Sets)
	return ca.New(ca.ServiceConfig{
		Revocations: sets,
		DataDir:     env.DataDir, TrustDomain: env.TrustDomain,
		RootCertFile: f.rootCert, RootKeyFile: f.rootKey, ChainFile: f.chain,
		TokenKeyFile: f.tokenKey, PublisherKeyFile: f.publisherKey,
		CertTTL: certTTL, CRLValidity: crlValidity, MaxIssued: f.maxIssued,
		ServingDNS: append(append([]string(nil), f.sans.dns...), f.webhookSANs.dns...),
		ServingIPs: append(append([]net.IP(nil), f.sans.ips...), f.webhookSANs.ips...),
		Logger:     env.Logger, Registerer: env.Registry,
	})
}

// sanList is --tls-san: DNS names and IPs, repeatable or comma-separated.
type sanList struct {
	dns []string
	ips []net.IP
}

func (l *sanList) String() string {
	out := append([]string(nil), l.dns...)
	for _, ip := range l.ips {
		out = append(out, ip.String())
	}
	return strings.Join(out, ",")
}

func (l *sanList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			return fmt.Errorf("empty SAN in %q", v)
		case net.ParseIP(s) != nil:
			l.ips = append(l.ips, net.ParseIP(s))
		default:
			l.dns = append(l.dns, s)
		}
	}
	return nil
}
