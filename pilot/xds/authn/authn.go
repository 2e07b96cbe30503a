// Package authn says who is on the other end of an xDS stream: the SPIFFE ID of
// the verified TLS client certificate (pilot's TLS listener asks for one and
// verifies it against the mesh's trust bundle), or nobody (plaintext, or TLS
// without a client certificate). The ADS server binds a registration to it: the
// node's namespace and service account come from the certificate, never from its
// metadata.
package authn

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/weft-mesh/weft/certs/spiffe"
)

// ErrUnauthenticated wraps every reason a peer presenting a certificate is not
// accepted (another trust domain, not a workload ID).
var ErrUnauthenticated = errors.New("unauthenticated")

// Peer is who a stream comes from.
type Peer struct {
	// Authenticated: the peer presented a client certificate that TLS verified
	// against the trust bundle, whose SPIFFE ID is ID.
	Authenticated bool
	ID            spiffeid.ID
	// Namespace and ServiceAccount are ID's (spiffe://<td>/ns/<ns>/sa/<sa>);
	// empty when not Authenticated.
	Namespace, ServiceAccount string
	// MayRegister: the peer may register as a workload (become an endpoint).
	// Always for an authenticated peer; for a plaintext one only when pilot runs
	// with --insecure-plaintext-registration; never for a TLS client without a
	// certificate (the flag is about the plaintext port).
	MayRegister bool
	// Key is what the per-identity stream bound counts by: the SPIFFE ID and
	// the source address ("spiffe://td/ns/a/sa/b@10.0.0.1") for an
	// authenticated peer, the source address alone ("ip:10.0.0.1") for any
	// other. The address is part of an authenticated key because every replica
	// of a workload has the same SPIFFE ID: a bound of a few streams per SPIFFE
	// ID would refuse the tenth replica. An IPv6 address counts by its /64 (one
	// host usually holds the whole prefix).
	Key string
	// Addr is the transport address ("" when gRPC gives none).
	Addr string
	// Serial is the client certificate's serial (nil when not Authenticated):
	// a stream is cut when the CRL comes to list it.
	Serial *big.Int
}

// String names the peer for errors and logs.
func (p Peer) String() string {
	if p.Authenticated {
		return p.ID.String()
	}
	if p.Addr == "" {
		return "unauthenticated peer"
	}
	return "unauthenticated peer " + p.Addr
}

// Identify returns the peer of a gRPC server context. A certificate that TLS
// verified but whose SPIFFE ID is not a workload of trustDomain is an error
// wrapping ErrUnauthenticated (the caller refuses the stream), not a downgrade to
// unauthenticated.
func Identify(ctx context.Context, trustDomain string, plaintextRegistration bool) (Peer, error) {
	gp, ok := peer.FromContext(ctx)
	if !ok {
		// Not a gRPC call (a handler called directly): nobody, who may
		// register nowhere.
		return Peer{Key: "ip:"}, nil
	}
	var p Peer
	if gp.Addr != nil {
		p.Addr = gp.Addr.String()
	}
	host := addrKey(p.Addr)
	p.Key = "ip:" + host
	tlsInfo, isTLS := gp.AuthInfo.(credentials.TLSInfo)
	if !isTLS {
		p.MayRegister = plaintextRegistration
		return p, nil
	}
	chains := tlsInfo.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		if len(tlsInfo.State.PeerCertificates) > 0 {
			// Not reachable with the listener's VerifyClientCertIfGiven; said
			// so that a misconfigured listener fails closed.
			return Peer{}, fmt.Errorf("authn: %s presented a certificate that was not verified: %w", p.Addr, ErrUnauthenticated)
		}
		return p, nil
	}
	leaf := chains[0][0]
	id, err := spiffe.FromCert(leaf)
	if err != nil {
		return Peer{}, fmt.Errorf("authn: client certificate of %s: %v: %w", p.Addr, err, ErrUnauthenticated)
	}
	if td := id.TrustDomain().Name(); td != trustDomain {
		return Peer{}, fmt.Errorf("authn: client certificate serial %x of %s: SPIFFE ID %s is of trust domain %q, pilot's is %q: %w",
			leaf.SerialNumber, p.Addr, id, td, trustDomain, ErrUnauthenticated)
	}
	ns, sa, err := spiffe.ParseWorkload(id)
	if err != nil {
		return Peer{}, fmt.Errorf("authn: client certificate serial %x of %s: %v: %w", leaf.SerialNumber, p.Addr, err, ErrUnauthenticated)
	}
	return Peer{Authenticated: true, ID: id, Namespace: ns, ServiceAccount: sa, MayRegister: true, Key: id.String() + "@" + host, Addr: p.Addr, Serial: leaf.SerialNumber}, nil
}

// addrKey is addr without its port, an IPv6 address reduced to its /64 (addr
// itself when it is not an IP address).
func addrKey(addr string) string {
	h := addr
	if hp, _, err := net.SplitHostPort(addr); err == nil {
		h = hp
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return h
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}
