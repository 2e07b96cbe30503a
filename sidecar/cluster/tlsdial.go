package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/weft-mesh/weft/sidecar/mtls"
)

// DialFunc opens a TCP connection to addr ("ip:port").
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// ErrNoIdentity: an endpoint is to be reached with mTLS and this sidecar has no
// mTLS (it started without a workload identity). Never a plaintext fallback.
var ErrNoIdentity = errors.New("mTLS required and this sidecar has no workload identity")

// DialEndpoint opens a connection to e: TCP with dial, then, when e is dialled
// with mTLS (e.TLS() set: its cluster has a transport socket and it is marked
// mTLS-capable), the client handshake with m. The result is then an
// *mtls.Conn, verified against the trust bundle, the CRL and the cluster's
// SPIFFE IDs. A refused handshake is an error, never a plaintext connection.
func DialEndpoint(ctx context.Context, dial DialFunc, m *mtls.Manager, e *Endpoint) (net.Conn, error) {
	if e.tls != nil && m == nil {
		return nil, fmt.Errorf("endpoint %s: %w", e.Address(), ErrNoIdentity)
	}
	nc, err := dial(ctx, e.Address())
	if err != nil || e.tls == nil {
		return nc, err
	}
	return m.Client(ctx, nc, e.Address(), e.tls)
}

// endpointKey carries the endpoint being dialled through net/http's dial hook.
type endpointKey struct{}
