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
package ads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/status"
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

// Config configures a Server. Every limit is explicit and required.
type Config struct {
	Logger hclog.Logger
	Source Source
	Status *status.Tracker
	// MaxUnacked bounds the responses sent on one stream and not yet answered
	// (ACK or NACK). Exceeding it cuts the stream with ResourceExhausted.
	MaxUnacked int
	// SendTimeout bounds one Send; a proxy that does not read is cut with
	// DeadlineExceeded.
	SendTimeout time.Duration
	// RecvQueue is how many received requests may wait for the stream owner.
	RecvQueue int
	// MaxSubscriptions bounds the explicit resource names per type per stream.
	MaxSubscriptions int
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
}

// New checks cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: cfg.Logger, diffs: newDiffCache(cfg.DiffCacheEntries), wraps: newWrapCache(cfg.DiffCacheEntries)}, nil
}

// Register registers the ADS service on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// served reports whether typ is a type pilot serves.
func served(typ string) bool {
	for _, t := range snapshot.PushOrder {
		if t == typ {
			return true
		}
	}
	return false
}

// stream is the part of a stream's state shared by SotW and delta. Owned by the
// stream's handler goroutine.
type stream struct {
	s      *Server
	ctx    context.Context
	log    hclog.Logger
	nodeID string
	watch  Watch
	conn   *status.Conn
	send   func(proto.Message) error // the raw gRPC Send

	nonce       uint64              // last nonce issued on this stream
	outstanding map[string][]uint64 // type -> nonces sent and not answered, ascending
	unacked     int                 // total of outstanding
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
	reqs := make(chan R, s.cfg.RecvQueue)
	errc := make(chan error, 1)
	go recvLoop(ctx, recv, reqs, errc)
	var first R
	select {
	case first = <-reqs:
	case err := <-errc:
		return endErr(err)
	case <-ctx.Done():
		return ctx.Err()
	}
	base, err := s.open(ctx, first.GetNode(), send, kind)
	if err != nil {
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
		case err := <-errc:
			return err
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
	}
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

// open validates the first request's node and connects it to the source and the
// status tracker.
func (s *Server) open(ctx context.Context, p *corev3.Node, send func(proto.Message) error, kind string) (*stream, error) {
	if p.GetId() == "" {
		return nil, grpcstatus.Error(codes.InvalidArgument, "ads: first request: node.id is required")
	}
	n, err := node.FromProto(p)
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "ads: first request: %v", err)
	}
	w, err := s.cfg.Source.Connect(n)
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Unavailable, "ads: connect %s: %v", n.ID, err)
	}
	st := &stream{s: s, ctx: ctx, log: s.log.With("node", n.ID, "stream", kind), nodeID: n.ID, watch: w, send: send,
		conn: s.cfg.Status.ConnectFrom(n, peerAddr(ctx), s.cfg.Clock()), outstanding: map[string][]uint64{}}
	st.log.Debug("stream opened")
	return st, nil
}

// peerAddr is the stream's transport address: outlier reports for its node are
// taken only from the same address (status.Tracker.ReportOutliers).
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (st *stream) close(err error) {
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

// nextNonce issues a nonce and counts it outstanding; past MaxUnacked the stream
// is cut.
func (st *stream) nextNonce(typ string) (string, error) {
	if st.unacked >= st.s.cfg.MaxUnacked {
		return "", grpcstatus.Errorf(codes.ResourceExhausted,
			"ads: node %s has %d responses unanswered (limit %d); closing the stream so it resyncs", st.nodeID, st.unacked, st.s.cfg.MaxUnacked)
	}
	st.nonce++
	st.outstanding[typ] = append(st.outstanding[typ], st.nonce)
	st.unacked++
	return strconv.FormatUint(st.nonce, 10), nil
}

// answered drops nonce and every older nonce of typ from the outstanding set:
// clients may answer only the latest of several responses.
func (st *stream) answered(typ, nonce string) {
	n, err := strconv.ParseUint(nonce, 10, 64)
	if err != nil {
		return
	}
	q := st.outstanding[typ]
	i := 0
	for i < len(q) && q[i] <= n {
		i++
	}
	st.unacked -= i
	st.outstanding[typ] = q[i:]
}

// sendMsg sends with SendTimeout. gRPC's Send cannot be interrupted, so it runs in
// its own goroutine; on timeout the handler returns, which closes the stream and
// unblocks that goroutine.
func (st *stream) sendMsg(m proto.Message) error {
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
		return st.ctx.Err()
	}
}

// endErr maps how the stream ended to the handler's return value.
func endErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
