// Package ads serves Weft's snapshots over the Aggregated Discovery Service, both
// state of the world (StreamAggregatedResources) and incremental
// (DeltaAggregatedResources).
//
// One goroutine owns each stream's state: a receiving goroutine only forwards
// requests to it through a bounded channel. Snapshots are pulled, never pushed:
// the source signals a 1-buffered channel and the owner reads the latest snapshot,
// so bursts coalesce and a producer never blocks on a slow stream. A stream whose
// proxy cannot keep up (more than MaxUnacked responses unanswered, or a send that
// does not complete within SendTimeout) is cut and the proxy resyncs on reconnect
// instead of pilot buffering for it.
//
// Who a stream is comes from its transport (pilot/xds/authn): the namespace and
// service account of a registering node are its client certificate's, and a
// node whose metadata says otherwise is refused; a registration without a
// certificate is refused unless Config.PlaintextRegistration. One node id is held
// by one stream: another stream claiming it is refused unless it proves the same
// identity, and then the older stream is closed (a sidecar's reconnect). Every
// stream counts against its peer's bound (MaxStreamsPerIdentity) from its start,
// before its first request is read.
package ads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/node/envoynode"
	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/authn"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// Watch is one proxy's subscription to its snapshots (meshcache.Proxy).
type Watch interface {
	Snapshot() *snapshot.Snapshot // latest; nil while none exists yet
	Changed() <-chan struct{}     // signalled, coalesced, when Snapshot may have changed
	Close()                       // the stream ended: unregister the proxy
}

// Source hands out Watches; Connect is called once per stream with the node from
// its first request.
type Source interface {
	Connect(n *node.Node) (Watch, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(n *node.Node) (Watch, error)

// Connect calls f.
func (f SourceFunc) Connect(n *node.Node) (Watch, error) { return f(n) }

// Defaults of the bounds on what one peer may make pilot hold.
const (
	// DefaultMaxSubscriptions bounds the explicitly subscribed names of one
	// stream over all types. A subscribed name of L bytes costs pilot about
	// 2L bytes of RSS (the subscription set and the request it came in, and
	// the Go heap's headroom; conformance/attacker measured 127 names of 512
	// bytes at ~126 KiB), so a stream at the bound with Weft's longest names
	// holds ~3 MiB, and MaxStreamsPerIdentity bounds how many one identity
	// opens from one address. A Weft sidecar names one EDS resource per
	// cluster it routes to and one RDS resource per HTTP port: 4,096 covers a
	// sidecar routing to ~4,000 clusters; beyond that a mesh scopes its
	// sidecars.
	DefaultMaxSubscriptions = 4096
	// DefaultMaxReadOnlySubscriptions is MaxSubscriptions for a stream that
	// may not register (no client certificate, and no plaintext registration):
	// a debugging tool or a proxyless gRPC client without a certificate names
	// a listener, a route, a cluster and its endpoints per target, so 128
	// serves ~30 targets, while thousands of such streams from anywhere stay
	// within a known memory: at the bound with names of the longest size a
	// stream costs pilot ~155 KiB of RSS, ~29 KiB of it the stream itself
	// (conformance/attacker TestHostileStreamsRSS: 2,000 of them ~310 MiB,
	// bound 400 MiB).
	DefaultMaxReadOnlySubscriptions = 128
	// DefaultMaxResourceNameBytes bounds one subscribed name. Weft's longest
	// names are outbound cluster names, "outbound|<port>|<subset>|<host>":
	// at most 5+1+63+1+253 plus the prefix, about 330 bytes.
	DefaultMaxResourceNameBytes = 512
	// DefaultMaxStreamsPerIdentity bounds the open streams of one peer key
	// (authn.Peer.Key: SPIFFE ID and source address, or the address alone).
	// A sidecar holds one, a reconnect briefly two; a pod whose app is also a
	// proxyless gRPC client a few more.
	DefaultMaxStreamsPerIdentity = 8
	// DefaultMaxReadOnlyStreams bounds the open streams that may not register,
	// over all peers: the per-address bound alone lets one who holds many
	// addresses (IPv6 prefixes, NATs) open any number. At
	// DefaultMaxReadOnlySubscriptions each costs at most ~155 KiB, so these
	// streams together stay under ~640 MiB; streams with certificates (the
	// sidecars) are not counted and never refused for it.
	DefaultMaxReadOnlyStreams = 4096
)

// Revocations tells streams when the CRL changes (pilot/ca.Service): an
// authenticated stream whose certificate the CRL comes to list is cut.
type Revocations interface {
	TrustChanged() <-chan struct{} // closed (and replaced) on every change
	CRL() *revoke.CRL
}

// Config configures a Server. Every limit is explicit and required.
type Config struct {
	Logger hclog.Logger
	Source Source
	Status *status.Tracker
	// TrustDomain is the mesh's: a client certificate of another one is
	// refused.
	TrustDomain string
	// PlaintextRegistration lets a stream without a client certificate
	// register as a workload with the namespace its metadata claims
	// (pilot --insecure-plaintext-registration). Off, such a stream may only
	// read.
	PlaintextRegistration bool
	// MaxStreamsPerIdentity bounds the open streams per authn.Peer.Key; one
	// more is refused with ResourceExhausted before its first request is read.
	MaxStreamsPerIdentity int
	// MaxReadOnlyStreams bounds the open streams whose peer may not register,
	// over all peers; one more is refused the same way.
	MaxReadOnlyStreams int
	// MaxResourceNameBytes bounds each resource name a request subscribes to
	// (or lists in initial_resource_versions).
	MaxResourceNameBytes int
	// Revocations, when set, cuts the streams of revoked certificates.
	Revocations Revocations
	// MaxUnacked bounds the responses sent on one stream and not yet answered
	// (ACK or NACK). Exceeding it cuts the stream with ResourceExhausted.
	MaxUnacked int
	// SendTimeout bounds one Send; a proxy that does not read is cut with
	// DeadlineExceeded.
	SendTimeout time.Duration
	// RecvQueue is how many received requests may wait for the stream owner.
	RecvQueue int
	// MaxSubscriptions bounds the explicitly subscribed resource names of one
	// stream, over all types (the wildcard does not count);
	// MaxReadOnlySubscriptions is the bound for a stream whose peer may not
	// register.
	MaxSubscriptions         int
	MaxReadOnlySubscriptions int
	// DiffCacheEntries bounds the shared caches of snapshot-to-snapshot diffs
	// and of delta resource wrappers (each).
	DiffCacheEntries int
	Clock            func() time.Time // nil = time.Now
}

func (c *Config) check() error {
	switch {
	case c.Logger == nil:
		return errors.New("ads: Config.Logger is required")
	case c.Source == nil:
		return errors.New("ads: Config.Source is required")
	case c.Status == nil:
		return errors.New("ads: Config.Status is required")
	case c.MaxUnacked <= 0:
		return fmt.Errorf("ads: Config.MaxUnacked must be > 0, got %d", c.MaxUnacked)
	case c.SendTimeout <= 0:
		return fmt.Errorf("ads: Config.SendTimeout must be > 0, got %v", c.SendTimeout)
	case c.RecvQueue <= 0:
		return fmt.Errorf("ads: Config.RecvQueue must be > 0, got %d", c.RecvQueue)
	case c.MaxSubscriptions <= 0:
		return fmt.Errorf("ads: Config.MaxSubscriptions must be > 0, got %d", c.MaxSubscriptions)
	case c.DiffCacheEntries <= 0:
		return fmt.Errorf("ads: Config.DiffCacheEntries must be > 0, got %d", c.DiffCacheEntries)
	case c.MaxReadOnlySubscriptions <= 0:
		return fmt.Errorf("ads: Config.MaxReadOnlySubscriptions must be > 0, got %d", c.MaxReadOnlySubscriptions)
	case c.TrustDomain == "":
		return errors.New("ads: Config.TrustDomain is required")
	case c.MaxStreamsPerIdentity <= 0:
		return fmt.Errorf("ads: Config.MaxStreamsPerIdentity must be > 0, got %d", c.MaxStreamsPerIdentity)
	case c.MaxReadOnlyStreams <= 0:
		return fmt.Errorf("ads: Config.MaxReadOnlyStreams must be > 0, got %d", c.MaxReadOnlyStreams)
	case c.MaxResourceNameBytes <= 0:
		return fmt.Errorf("ads: Config.MaxResourceNameBytes must be > 0, got %d", c.MaxResourceNameBytes)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

// Server implements the ADS service.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	cfg   Config
	log   hclog.Logger
	diffs *diffCache
	wraps *wrapCache

	mu       sync.Mutex        // guards the fields below; held for map updates only
	claims   map[string]*claim // node id -> the stream holding it
	streams  map[string]int    // authn.Peer.Key -> open streams
	readOnly int               // open streams whose peer may not register
}

// claim is one stream's hold on a node id.
type claim struct {
	peer  authn.Peer
	close context.CancelCauseFunc // ends the holding stream
}

// New checks cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: cfg.Logger, diffs: newDiffCache(cfg.DiffCacheEntries), wraps: newWrapCache(cfg.DiffCacheEntries),
		claims: map[string]*claim{}, streams: map[string]int{}}, nil
}

// Streams is how many streams peer key holds open (tests and metrics).
func (s *Server) Streams(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[key]
}

// acquire counts a stream of p against MaxStreamsPerIdentity.
func (s *Server) acquire(p authn.Peer) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.streams[p.Key]; n >= s.cfg.MaxStreamsPerIdentity {
		return nil, grpcstatus.Errorf(codes.ResourceExhausted, "ads: %s already has %d ADS streams open (limit %d per identity and address)", p, n, s.cfg.MaxStreamsPerIdentity)
	}
	if !p.MayRegister && s.readOnly >= s.cfg.MaxReadOnlyStreams {
		return nil, grpcstatus.Errorf(codes.ResourceExhausted,
			"ads: pilot already serves %d streams without a client certificate (limit %d); %s is refused (a client certificate is not counted)", s.readOnly, s.cfg.MaxReadOnlyStreams, p)
	}
	s.streams[p.Key]++
	if !p.MayRegister {
		s.readOnly++
	}
	return func() {
		s.mu.Lock()
		if s.streams[p.Key]--; s.streams[p.Key] <= 0 {
			delete(s.streams, p.Key)
		}
		if !p.MayRegister {
			s.readOnly--
		}
		s.mu.Unlock()
	}, nil
}

// claim makes the stream of p (ended by closeStream) the holder of node id. A
// held id is refused with AlreadyExists unless the holder has the same proven
// identity (the same SPIFFE ID; for plaintext, only with PlaintextRegistration,
// the same source address): then the holder is closed, as a sidecar reconnecting
// before pilot saw its old connection die needs.
func (s *Server) claim(id string, p authn.Peer, closeStream context.CancelCauseFunc) (*claim, error) {
	c := &claim{peer: p, close: closeStream}
	s.mu.Lock()
	old := s.claims[id]
	if old != nil && !s.sameIdentity(old.peer, p) {
		s.mu.Unlock()
		s.log.Warn("node id claimed by another identity: refused", "node", id, "holder", old.peer.String(), "claimant", p.String())
		return nil, grpcstatus.Errorf(codes.AlreadyExists, "ads: node id %q is held by another stream of another identity; %s cannot take it over", id, p)
	}
	s.claims[id] = c
	s.mu.Unlock()
	if old != nil {
		s.log.Info("node reconnected with the same identity: closing its older stream", "node", id, "peer", p.String())
		old.close(grpcstatus.Errorf(codes.Aborted, "ads: node %s opened a newer stream with the same identity (%s); this one is closed", id, p))
	}
	return c, nil
}

func (s *Server) sameIdentity(holder, claimant authn.Peer) bool {
	switch {
	case holder.Authenticated || claimant.Authenticated:
		return holder.Authenticated && claimant.Authenticated && holder.ID == claimant.ID
	case s.cfg.PlaintextRegistration:
		return holder.Key == claimant.Key
	}
	return false
}

// unclaim releases id if c still holds it.
func (s *Server) unclaim(id string, c *claim) {
	s.mu.Lock()
	if s.claims[id] == c {
		delete(s.claims, id)
	}
	s.mu.Unlock()
}

// Register registers the ADS service on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// numTypes is how many types pilot serves (snapshot.PushOrder).
const numTypes = 8

// typeIndex is typ's place in snapshot.PushOrder, -1 for a type pilot does not
// serve. Streams keep per-type state in arrays indexed by it: a long type URL
// hashed for a map lookup on every request and every type of every push costs
// more than the state itself.
func typeIndex(typ string) int {
	switch typ {
	case snapshot.ClusterType:
		return 0
	case snapshot.EndpointType:
		return 1
	case snapshot.LbEndpointType:
		return 2
	case snapshot.ListenerType:
		return 3
	case snapshot.RouteType:
		return 4
	case snapshot.SecretType:
		return 5
	case snapshot.StalenessType:
		return 6
	case snapshot.ManifestType:
		return 7
	}
	return -1
}

// served reports whether typ is a type pilot serves.
func served(typ string) bool { return typeIndex(typ) >= 0 }

// stream is the part of a stream's state shared by SotW and delta. Owned by the
// stream's handler goroutine.
type stream struct {
	s      *Server
	ctx    context.Context
	log    hclog.Logger
	nodeID string
	peer   authn.Peer
	claim  *claim
	watch  Watch
	conn   *status.Conn
	send   func(proto.Message) error // the raw gRPC Send
	subs   [numTypes]int             // by typeIndex: explicitly subscribed names (MaxSubscriptions counts their sum)
	// revoked is signalled when the CRL changes (nil: never, for a stream
	// without a certificate or a server without Revocations).
	revoked <-chan struct{}

	nonce       uint64              // last nonce issued on this stream
	outstanding [numTypes][]pending // by typeIndex: responses sent and not answered, ascending nonces
	unacked     int                 // total of outstanding
	// unackedBytes is what outstanding's responses weigh on the wire: an
	// upper bound of what gRPC still holds of them (see sendMsg).
	unackedBytes int
}

// pending is one response sent and not answered yet.
type pending struct {
	nonce uint64
	bytes int // on the wire, with gRPC's message prefix
}

// request is what the shared stream code reads of either request type.
type request interface {
	GetNode() *corev3.Node
	GetTypeUrl() string
}

// owner is the protocol-specific half of a stream (SotW or delta).
type owner[R request] interface {
	handle(req R) error
	pushAll() error
}

// serve runs one ADS stream: a receiving goroutine forwards requests, the
// calling goroutine owns all state (mk builds it from the first request's node).
func serve[R request](s *Server, ctx context.Context, kind string, recv func() (R, error), send func(proto.Message) error, mk func(*stream) owner[R]) error {
	p, err := authn.Identify(ctx, s.cfg.TrustDomain, s.cfg.PlaintextRegistration)
	if err != nil {
		return grpcstatus.Error(codes.Unauthenticated, "ads: "+err.Error())
	}
	release, err := s.acquire(p)
	if err != nil {
		s.log.Debug("stream refused", "peer", p.String(), "error", err)
		return err
	}
	defer release()
	// The stream ends when gRPC says so or when a newer stream of the same
	// identity claims its node id (the cause says which).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reqs := make(chan R, s.cfg.RecvQueue)
	errc := make(chan error, 1)
	go recvLoop(ctx, recv, reqs, errc)
	var first R
	select {
	case first = <-reqs:
	case err := <-errc:
		return endErr(err)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	base, err := s.open(ctx, cancel, p, first.GetNode(), send, kind)
	if err != nil {
		s.log.Info("stream refused", "peer", p.String(), "error", err)
		return err
	}
	err = run(base, mk(base), first, reqs, errc)
	base.close(err)
	return endErr(err)
}

// run is the owner loop: requests, then snapshot changes, until the stream ends.
func run[R request](st *stream, o owner[R], first R, reqs <-chan R, errc <-chan error) error {
	if err := o.handle(first); err != nil {
		return err
	}
	for {
		select {
		case req := <-reqs:
			if err := o.handle(req); err != nil {
				return err
			}
		case <-st.watch.Changed():
			// Answers already received count before a new push: a proxy that
			// keeps up is never cut for responses it has in fact answered.
			if err := drain(reqs, o.handle); err != nil {
				return err
			}
			if err := o.pushAll(); err != nil {
				return err
			}
		case <-st.revoked:
			if err := st.checkRevoked(); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-st.ctx.Done():
			return context.Cause(st.ctx)
		}
	}
}

// checkRevoked takes the next CRL-change signal, then refuses the stream if
// the current CRL lists its certificate (in this order, so a change between
// the two is not missed).
func (st *stream) checkRevoked() error {
	rev := st.s.cfg.Revocations
	if rev == nil || !st.peer.Authenticated || st.peer.Serial == nil {
		return nil
	}
	st.revoked = rev.TrustChanged()
	if crl := rev.CRL(); crl != nil && crl.Revoked(st.peer.Serial) {
		return grpcstatus.Errorf(codes.PermissionDenied, "ads: node %s: client certificate serial %x of %s is revoked (CRL %d); closing the stream",
			st.nodeID, st.peer.Serial, st.peer.ID, crl.Number())
	}
	return nil
}

// recvLoop forwards requests to the owner until the stream ends. It is the only
// other goroutine touching the stream, and only through Recv.
func recvLoop[T any](ctx context.Context, recv func() (T, error), out chan<- T, errc chan<- error) {
	for {
		req, err := recv()
		if err != nil {
			errc <- err
			return
		}
		select {
		case out <- req:
		case <-ctx.Done():
			return
		}
	}
}

// drain handles every request already queued, without waiting.
func drain[T any](reqs <-chan T, handle func(T) error) error {
	for {
		select {
		case req := <-reqs:
			if err := handle(req); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// open validates the first request's node, binds it to the stream's peer,
// claims its id and connects it to the source and the status tracker.
func (s *Server) open(ctx context.Context, closeStream context.CancelCauseFunc, p authn.Peer, pn *corev3.Node, send func(proto.Message) error, kind string) (*stream, error) {
	if pn.GetId() == "" {
		return nil, grpcstatus.Error(codes.InvalidArgument, "ads: first request: node.id is required")
	}
	n, err := envoynode.FromProto(pn)
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "ads: first request: %v", err)
	}
	if err := bind(n, p); err != nil {
		return nil, err
	}
	c, err := s.claim(n.ID, p, closeStream)
	if err != nil {
		return nil, err
	}
	w, err := s.cfg.Source.Connect(n)
	if err != nil {
		s.unclaim(n.ID, c)
		return nil, grpcstatus.Errorf(codes.Unavailable, "ads: connect %s: %v", n.ID, err)
	}
	st := &stream{s: s, ctx: ctx, log: s.log.With("node", n.ID, "stream", kind), nodeID: n.ID, peer: p, claim: c, watch: w, send: send,
		conn: s.cfg.Status.ConnectFrom(n, reporter(p), s.cfg.Clock())}
	st.log.Debug("stream opened", "peer", p.String())
	if err := st.checkRevoked(); err != nil {
		st.close(err)
		return nil, err
	}
	return st, nil
}

// bind makes the node's identity the peer's: an authenticated node's namespace
// and service account are its certificate's (metadata may repeat them, never
// differ) and Identity its SPIFFE ID; an unauthenticated node has no Identity and
// registers only if the peer may.
func bind(n *node.Node, p authn.Peer) error {
	n.Identity = ""
	if !p.Authenticated {
		if n.Registers() && !p.MayRegister {
			return grpcstatus.Errorf(codes.PermissionDenied,
				"ads: node %s: registration as a workload of namespace %q refused: %s has no client certificate (the plaintext port registers only with pilot --insecure-plaintext-registration)",
				n.ID, n.Namespace, p)
		}
		return nil
	}
	if n.Namespace != "" && n.Namespace != p.Namespace {
		return grpcstatus.Errorf(codes.PermissionDenied, "ads: node %s: metadata namespace %q disagrees with the client certificate's %q (%s)", n.ID, n.Namespace, p.Namespace, p.ID)
	}
	if n.ServiceAccount != "" && n.ServiceAccount != p.ServiceAccount {
		return grpcstatus.Errorf(codes.PermissionDenied, "ads: node %s: metadata serviceAccount %q disagrees with the client certificate's %q (%s)", n.ID, n.ServiceAccount, p.ServiceAccount, p.ID)
	}
	n.Namespace, n.ServiceAccount, n.Identity = p.Namespace, p.ServiceAccount, p.ID.String()
	return nil
}

// reporter is what outlier reports of the stream's node must come from
// (status.Tracker.ReportOutliers): the SPIFFE ID of an authenticated stream,
// the transport address of any other.
func reporter(p authn.Peer) string {
	if p.Authenticated {
		return p.ID.String()
	}
	return p.Addr
}

func (st *stream) close(err error) {
	st.s.unclaim(st.nodeID, st.claim)
	st.watch.Close()
	st.conn.Disconnect(st.s.cfg.Clock())
	if err != nil {
		st.log.Info("stream closed", "error", err)
	} else {
		st.log.Debug("stream closed")
	}
}

// checkNode enforces that a stream keeps the identity of its first request.
func (st *stream) checkNode(p *corev3.Node) error {
	if id := p.GetId(); id != "" && id != st.nodeID {
		return grpcstatus.Errorf(codes.InvalidArgument, "ads: node.id changed on the stream from %q to %q", st.nodeID, id)
	}
	return nil
}

// admit runs the checks every request passes: same node, a type URL, and a type
// pilot serves (others are ignored: ok=false with a nil error).
func (st *stream) admit(req request, now time.Time) (typ string, ok bool, err error) {
	if err := st.checkNode(req.GetNode()); err != nil {
		return "", false, err
	}
	typ = req.GetTypeUrl()
	if typ == "" {
		return "", false, grpcstatus.Error(codes.InvalidArgument, "ads: request without type_url")
	}
	st.conn.Seen(now)
	if !served(typ) {
		st.log.Debug("ignoring request for a type pilot does not serve", "type", typ)
		return typ, false, nil
	}
	return typ, true, nil
}

// nextNonce issues a nonce for a response of typ (a served type) and counts it
// outstanding; past MaxUnacked the stream is cut.
func (st *stream) nextNonce(typ string) (string, error) {
	if st.unacked >= st.s.cfg.MaxUnacked {
		return "", grpcstatus.Errorf(codes.ResourceExhausted,
			"ads: node %s has %d responses unanswered (limit %d); closing the stream so it resyncs", st.nodeID, st.unacked, st.s.cfg.MaxUnacked)
	}
	st.nonce++
	i := typeIndex(typ)
	st.outstanding[i] = append(st.outstanding[i], pending{nonce: st.nonce})
	st.unacked++
	return strconv.FormatUint(st.nonce, 10), nil
}

// answered drops nonce and every older nonce of typ from the outstanding set:
// clients may answer only the latest of several responses.
func (st *stream) answered(typ, nonce string) {
	n, err := strconv.ParseUint(nonce, 10, 64)
	ti := typeIndex(typ)
	if err != nil || ti < 0 {
		return
	}
	q := st.outstanding[ti]
	i := 0
	for i < len(q) && q[i].nonce <= n {
		st.unackedBytes -= q[i].bytes
		i++
	}
	st.unacked -= i
	st.outstanding[ti] = q[i:]
}

// grpcMsgPrefix is the length prefix gRPC writes before each message.
const grpcMsgPrefix = 5

// DirectSendBytes bounds the bytes of responses outstanding on a stream (sent,
// not answered) under which a response is sent without the SendTimeout
// guard. grpc-go's Send blocks only for its per-stream write quota (64 KiB,
// internal/transport's defaultWriteQuota), which it takes back as its writer
// hands the bytes to the connection: every byte it still holds belongs to a
// response the proxy has not answered, as a proxy answers only what it has
// received. So below the quota Send cannot block, and needs neither a
// goroutine nor a timer; half of it leaves a margin. Past it, sendMsg guards
// the Send as before, and a proxy that stops reading is still cut after
// SendTimeout.
const DirectSendBytes = 32 << 10

// sendMsg sends m, a response of typ (a served type) of size bytes whose nonce
// nextNonce just issued. When the stream's outstanding bytes are under
// DirectSendBytes it sends directly; else with SendTimeout: gRPC's Send cannot
// be interrupted, so it runs in its own goroutine, and on timeout the handler
// returns, which closes the stream and unblocks that goroutine.
func (st *stream) sendMsg(typ string, m proto.Message, size int) error {
	direct := st.unackedBytes < DirectSendBytes
	if q := st.outstanding[typeIndex(typ)]; len(q) > 0 && q[len(q)-1].nonce == st.nonce {
		q[len(q)-1].bytes = size + grpcMsgPrefix
		st.unackedBytes += size + grpcMsgPrefix
	}
	if !direct {
		return st.guardedSend(m)
	}
	if err := st.send(m); err != nil {
		return fmt.Errorf("ads: send to %s: %w", st.nodeID, err)
	}
	return nil
}

func (st *stream) guardedSend(m proto.Message) error {
	done := make(chan error, 1)
	go func() { done <- st.send(m) }()
	t := time.NewTimer(st.s.cfg.SendTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("ads: send to %s: %w", st.nodeID, err)
		}
		return nil
	case <-t.C:
		return grpcstatus.Errorf(codes.DeadlineExceeded, "ads: node %s did not accept a response within %v; closing the stream", st.nodeID, st.s.cfg.SendTimeout)
	case <-st.ctx.Done():
		return context.Cause(st.ctx)
	}
}

// maxSubscriptions is the stream's bound on subscribed names.
func (st *stream) maxSubscriptions() int {
	if st.peer.MayRegister {
		return st.s.cfg.MaxSubscriptions
	}
	return st.s.cfg.MaxReadOnlySubscriptions
}

// readOnlyNote says, in an error, why a read-only stream's bound is lower.
func (st *stream) readOnlyNote() string {
	if st.peer.MayRegister {
		return ""
	}
	return " (a stream that may not register; with a client certificate the limit is " + strconv.Itoa(st.s.cfg.MaxSubscriptions) + ")"
}

// checkNames enforces MaxResourceNameBytes on the names of one request.
func (st *stream) checkNames(typ string, lists ...[]string) error {
	lim := st.s.cfg.MaxResourceNameBytes
	for _, l := range lists {
		for _, n := range l {
			if len(n) > lim {
				return grpcstatus.Errorf(codes.InvalidArgument, "ads: %s resource name %q...: %d bytes, limit %d", status.TypeName(typ), n[:32], len(n), lim)
			}
		}
	}
	return nil
}

// subscribed records that typ now has n explicit names and enforces
// MaxSubscriptions over the stream's types. The caller checks before it keeps
// the new subscription.
func (st *stream) subscribed(typ string, n int) error {
	ti := typeIndex(typ) // admit let only served types through
	total := n
	for t, c := range st.subs {
		if t != ti {
			total += c
		}
	}
	if lim := st.maxSubscriptions(); total > lim {
		return grpcstatus.Errorf(codes.ResourceExhausted, "ads: node %s: %s subscription would bring the stream to %d resource names, limit %d over all types%s",
			st.nodeID, status.TypeName(typ), total, lim, st.readOnlyNote())
	}
	st.subs[ti] = n
	return nil
}

// endErr maps how the stream ended to the handler's return value.
func endErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
