// Package xdsclient is the sidecar's ADS client: one gRPC stream to pilot (or any
// xDS v3 management server), delta by default, state of the world by option.
//
// The client is generic: it knows the xDS protocol (subscriptions, versions, nonces,
// ACK/NACK, reconnect, failover) but not what resources mean. A Decode callback turns
// each wire resource into a validated Go value; an Apply callback receives the whole
// candidate state after every response and accepts (ACK) or rejects (NACK) it.
// Nothing is half applied: a response is committed whole or not at all.
//
// Subscriptions: a type is either wildcard (every type except the "named" ones) or
// named. Named types (RDS, EDS and SDS by default, see Config.NamedTypes) are
// subscribed by name, and the names are those the committed state references: every
// decoded value that implements Referencer contributes names. When a response drops a
// reference, the no longer referenced named resources are pruned in that same
// candidate, so Apply never sees orphans.
package xdsclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/bootstrap/node"
)

// Well-known Envoy type URLs.
const (
	TypeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	TypeSecret   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// Mode selects the ADS variant.
type Mode int

const (
	// Delta is incremental ADS (DeltaAggregatedResources), the default.
	Delta Mode = iota
	// SotW is state-of-the-world ADS (StreamAggregatedResources).
	SotW
)

func (m Mode) String() string {
	switch m {
	case Delta:
		return "delta"
	case SotW:
		return "sotw"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DecodeFunc turns one wire resource into the resource's name and a validated Go
// value. It must not keep res. The returned value is treated as immutable.
type DecodeFunc func(typeURL string, res *anypb.Any) (name string, value any, err error)

// ApplyFunc receives the complete candidate state. A nil error commits it (ACK); an
// error rejects the response (NACK with err.Error() as the message) and the previous
// state stays. The Update and everything it points to is shared and read-only.
type ApplyFunc func(ctx context.Context, u *Update) error

// Referencer is implemented by decoded values that point at named resources of
// another type (a Listener at its RouteConfiguration, a Cluster at its
// ClusterLoadAssignment). The client subscribes to exactly the names referenced by
// the committed state.
type Referencer interface {
	References() (typeURL string, names []string)
}

// MultiReferencer is the same for values that reference several types (a listener
// with a route and a secret). A value may implement either or both.
type MultiReferencer interface {
	AllReferences() map[string][]string
}

// Backoff bounds reconnect delays: the n-th consecutive failed round waits a uniformly
// random time in [0, min(Max, Initial*2^n)] ("full jitter").
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Config of a Client; checked by New.
type Config struct {
	Node *node.Node
	// Servers are pilot replicas (host:port). Each round of connection
	// attempts starts at a random one and goes on in order on failure, so a
	// fleet restarting at once spreads over the replicas instead of all
	// landing on the first; Ordered starts every round at Servers[0].
	Servers []string
	Ordered bool
	Mode    Mode
	// Types to subscribe, in the order the initial requests are sent.
	Types []string
	// NamedTypes overrides which of Types are subscribed by name rather than wildcard.
	// Nil means the default {RDS, EDS, SDS}.
	NamedTypes []string
	Decode     DecodeFunc
	Apply      ApplyFunc
	Logger     hclog.Logger
	Backoff    Backoff
	// DialOptions are added to every connection; without transport credentials the
	// connection is plaintext.
	DialOptions []grpc.DialOption
	// TLS, when set, makes every connection TLS with this configuration (mTLS
	// to pilot: its GetClientCertificate runs at each handshake, so a renewed
	// workload certificate is used from the next reconnect on, and the live
	// stream keeps the one it was made with). Nil: plaintext.
	TLS *tls.Config
	// Redial, if set, returns a channel closed when reconnecting at once is
	// worth it (svid.Holder.Changed: a new certificate after pilot refused an
	// expired one): the backoff wait is cut short and starts over.
	Redial func() <-chan struct{}
	// Keepalive detects a server that vanished without closing the connection;
	// until it does, the stream would look healthy and keep confirming the state.
	// Default: ping after 5m idle (the most a default grpc-go server tolerates),
	// 20s to answer. Pilot may allow shorter; set it here then.
	Keepalive keepalive.ClientParameters
	// ConnectTimeout bounds how long one server may take to accept a connection
	// before the next is tried. Default 5s.
	ConnectTimeout time.Duration
	// ConfirmAfter: a stream that stays up this long confirms the state the client
	// holds (the server had the chance to correct it). Default 2s.
	ConfirmAfter time.Duration
	// MaxResourcesPerResponse: a response with more is NACKed. Default 10000.
	MaxResourcesPerResponse int
	// MaxRecvBytes bounds one response message. Default 64 MiB.
	MaxRecvBytes int
	// Initial state the client already holds (last-known-good from disk); it is
	// announced to the server (initial_resource_versions / version_info).
	Initial *Update
	// InitialConfirmed is when Initial was last confirmed by a server (persisted
	// with it); LastConfirmed reports it until a stream confirms anew, so age counts
	// from then and not from the restart.
	InitialConfirmed time.Time
	// Now is the clock; default time.Now. Tests pass a fake.
	Now func() time.Time
}

// Limits and defaults.
const (
	DefaultConnectTimeout          = 5 * time.Second
	DefaultKeepaliveTime           = 5 * time.Minute
	DefaultKeepaliveTimeout        = 20 * time.Second
	DefaultConfirmAfter            = 2 * time.Second
	DefaultMaxResourcesPerResponse = 10000
	DefaultMaxRecvBytes            = 64 << 20
	DefaultBackoffInitial          = 500 * time.Millisecond
	DefaultBackoffMax              = 30 * time.Second
	// StreamWindow and ConnWindow are the HTTP/2 receive windows the client
	// dials pilot with. Fixed windows turn off grpc-go's BDP estimation, whose
	// PING on every burst of data cost pilot a PING ACK (a TLS record and a
	// write) per stream per push; 1 MiB covers a 2,000-endpoint assignment
	// (~55 KB) many times over, so a push is not held up by window updates.
	// Pilot may then have up to StreamWindow of responses in flight to a
	// sidecar that does not read, bounded in memory by the window.
	StreamWindow = 1 << 20
	ConnWindow   = 2 << 20
)

// WindowOptions dial with StreamWindow and ConnWindow (tools/bench/adsload
// dials its simulated sidecars with them too).
func WindowOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow)}
}

// ErrConfig is wrapped by every configuration error from New.
var ErrConfig = errors.New("xdsclient: invalid config")

func (c *Config) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if c.Node == nil {
		return bad("node: required")
	}
	if err := c.Node.Validate(); err != nil {
		return bad("%v", err)
	}
	if len(c.Servers) == 0 {
		return bad("servers: at least one required")
	}
	for i, s := range c.Servers {
		if s == "" {
			return bad("servers[%d]: empty", i)
		}
	}
	if c.Mode != Delta && c.Mode != SotW {
		return bad("mode: %v unknown", c.Mode)
	}
	if len(c.Types) == 0 {
		return bad("types: at least one required")
	}
	seen := map[string]bool{}
	for i, t := range c.Types {
		if t == "" {
			return bad("types[%d]: empty", i)
		}
		if seen[t] {
			return bad("types[%d]: %s listed twice", i, t)
		}
		seen[t] = true
	}
	if c.Decode == nil {
		return bad("decode: required")
	}
	if c.Apply == nil {
		return bad("apply: required")
	}
	if c.Logger == nil {
		return bad("logger: required")
	}
	if c.Backoff.Initial < 0 || c.Backoff.Max < 0 || (c.Backoff.Max != 0 && c.Backoff.Max < c.Backoff.Initial) {
		return bad("backoff: want 0 <= initial <= max, got %v..%v", c.Backoff.Initial, c.Backoff.Max)
	}
	for name, v := range map[string]int64{"connectTimeout": int64(c.ConnectTimeout), "confirmAfter": int64(c.ConfirmAfter),
		"maxResourcesPerResponse": int64(c.MaxResourcesPerResponse), "maxRecvBytes": int64(c.MaxRecvBytes)} {
		if v < 0 {
			return bad("%s: negative", name)
		}
	}
	if !c.InitialConfirmed.IsZero() && c.Initial == nil {
		return bad("initialConfirmed: set without initial")
	}
	if c.Initial != nil {
		for t := range c.Initial.Resources {
			if !seen[t] {
				return bad("initial: type %s is not in types", t)
			}
		}
	}
	return nil
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Backoff.Initial == 0 {
		d.Backoff.Initial = DefaultBackoffInitial
	}
	if d.Backoff.Max == 0 {
		d.Backoff.Max = max(DefaultBackoffMax, d.Backoff.Initial)
	}
	if d.Keepalive == (keepalive.ClientParameters{}) {
		d.Keepalive = keepalive.ClientParameters{Time: DefaultKeepaliveTime, Timeout: DefaultKeepaliveTimeout}
	}
	if d.ConnectTimeout == 0 {
		d.ConnectTimeout = DefaultConnectTimeout
	}
	if d.ConfirmAfter == 0 {
		d.ConfirmAfter = DefaultConfirmAfter
	}
	if d.MaxResourcesPerResponse == 0 {
		d.MaxResourcesPerResponse = DefaultMaxResourcesPerResponse
	}
	if d.MaxRecvBytes == 0 {
		d.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if d.NamedTypes == nil {
		d.NamedTypes = []string{TypeRoute, TypeEndpoint, TypeSecret}
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return d
}
