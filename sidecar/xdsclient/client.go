package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// TypeStatus is what /config_dump shows for one type.
type TypeStatus struct {
	TypeURL    string
	Version    string // last accepted version (SotW version_info, delta system_version_info)
	Nonce      string // latest nonce received on the current stream
	LastError  string // message of the last NACK; empty after an ACK
	ACKs       uint64
	NACKs      uint64
	Ignored    uint64 // responses dropped for an empty or repeated nonce
	Resources  int
	Wildcard   bool
	Subscribed []string // names requested (named types)
	Connected  bool     // subscribed on a live stream
	LastUpdate time.Time
}

// Status is an immutable snapshot of the client.
type Status struct {
	Mode          Mode
	Server        string // server of the current or last stream
	Connected     bool
	StreamUpSince time.Time // zero when no stream is up
	// UnknownTypeResponses counts responses for types not subscribed (ignored).
	UnknownTypeResponses uint64
	Types                []TypeStatus
}

// Client is one ADS client. Create with New, drive with Run.
type Client struct {
	cfg Config
	log hclog.Logger

	// eng is owned by the Run goroutine.
	eng *engine

	running atomic.Bool
	status  atomic.Pointer[Status]
	state   atomic.Pointer[Update]
	// conn is the connection of the live stream (nil when none), set by Run at
	// the stream's first response and cleared before it is closed.
	conn atomic.Pointer[grpc.ClientConn]

	// mu guards the confirmation clock, written by Run and read by LastConfirmed.
	mu          sync.Mutex
	upSince     time.Time // start of the live stream; zero if none
	confirmedAt time.Time // latest confirmation by an ACK or a finished stream
	nacked      bool      // the latest response of some type was rejected
}

// New checks cfg and returns a client holding cfg.Initial (if any).
func New(cfg Config) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	d := cfg.withDefaults()
	d.Logger = cfg.Logger.Named("xdsclient").With("node", cfg.Node.ID)
	c := &Client{cfg: d, log: d.Logger, eng: newEngine(d), confirmedAt: d.InitialConfirmed}
	c.state.Store(c.eng.state)
	c.publish("", false)
	return c, nil
}

// State is the committed state (read-only).
func (c *Client) State() *Update { return c.state.Load() }

// Status is the latest snapshot of the protocol state.
func (c *Client) Status() *Status { return c.status.Load() }

// Conn is the gRPC connection the live ADS stream runs on, or nil while no
// stream is up: other RPCs to the same server (outlier reports) ride on it, so
// the server sees them from the same peer as the stream that named the node.
// It is set once the stream's first response arrived (the server has the
// stream's node by then).
// The connection is closed when the stream ends; an RPC in flight then fails.
func (c *Client) Conn() *grpc.ClientConn { return c.conn.Load() }

// LastConfirmed is when the state was last confirmed by pilot: the last ACK, or now
// while a stream has been up for ConfirmAfter and nothing is rejected (the server
// had its chance to correct our initial versions and did not), or the end of the
// last such stream. Zero means never.
func (c *Client) LastConfirmed(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.upSince.IsZero() && !c.nacked && now.Sub(c.upSince) >= c.cfg.ConfirmAfter {
		return now
	}
	return c.confirmedAt
}

func (c *Client) publish(server string, connected bool) {
	c.mu.Lock()
	up := c.upSince
	c.mu.Unlock()
	c.status.Store(&Status{
		Mode:                 c.cfg.Mode,
		Server:               server,
		Connected:            connected,
		StreamUpSince:        up,
		UnknownTypeResponses: c.eng.unknown,
		Types:                c.eng.statuses(connected),
	})
}

// afterResponse records the result of one response for the confirmation clock.
func (c *Client) afterResponse() {
	nacked := false
	for _, t := range c.eng.order {
		if t.lastErr != "" {
			nacked = true
		}
	}
	c.mu.Lock()
	c.nacked = nacked
	if c.eng.lastAck.After(c.confirmedAt) {
		c.confirmedAt = c.eng.lastAck
	}
	c.mu.Unlock()
	c.state.Store(c.eng.state)
}

func (c *Client) streamUp(now time.Time) {
	c.mu.Lock()
	c.upSince = now
	c.mu.Unlock()
}

func (c *Client) streamDown(now time.Time) {
	c.mu.Lock()
	if !c.upSince.IsZero() && !c.nacked && now.Sub(c.upSince) >= c.cfg.ConfirmAfter && now.After(c.confirmedAt) {
		c.confirmedAt = now
	}
	c.upSince = time.Time{}
	c.mu.Unlock()
}

// ErrRunning is returned by a second concurrent Run.
var ErrRunning = errors.New("xdsclient: already running")

// Run keeps a stream to the first server that answers until ctx ends, reconnecting
// with backoff and failing over in order from a random first one (roundOrder). State survives reconnects. It returns
// ctx.Err().
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	round := 0
	for {
		// Taken before the attempt, so a new client certificate stored while it
		// fails still cuts the wait after it short.
		var redial <-chan struct{}
		if c.cfg.Redial != nil {
			redial = c.cfg.Redial()
		}
		healthy := false
		for _, srv := range roundOrder(c.cfg.Servers, c.cfg.Ordered, rand.IntN) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ok, err := c.stream(ctx, srv)
			c.streamDown(c.cfg.Now())
			c.publish(srv, false)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Warn("stream ended", "server", srv, "error", err)
			if ok {
				healthy = true
				break // a new round, from a new random server
			}
		}
		if healthy {
			round = 0
		}
		woken, err := sleep(ctx, c.backoff(round), redial)
		if err != nil {
			return err
		}
		round++
		if woken {
			c.log.Info("reconnecting at once: new client credentials")
			round = 0
		}
	}
}

// roundOrder is the order of one round of connection attempts: servers
// rotated to start at a random one (intn(n)), or as given when ordered.
func roundOrder(servers []string, ordered bool, intn func(int) int) []string {
	if ordered || len(servers) < 2 {
		return servers
	}
	k := intn(len(servers))
	return append(append(make([]string, 0, len(servers)), servers[k:]...), servers[:k]...)
}

// backoff is full jitter over an exponentially growing cap.
func (c *Client) backoff(round int) time.Duration {
	capd := c.cfg.Backoff.Initial
	for i := 0; i < round && capd < c.cfg.Backoff.Max; i++ {
		capd *= 2
	}
	capd = min(capd, c.cfg.Backoff.Max)
	if capd <= 0 {
		return 0
	}
	return rand.N(capd + 1)
}

// sleep waits d, or less if wake is closed (woken); nil wake never fires.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) (woken bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	case <-wake:
		return true, nil
	}
}

// stream runs one ADS stream to srv. ok reports whether it was healthy (got a
// response or stayed up ConfirmAfter), which resets the backoff.
func (c *Client) stream(ctx context.Context, srv string) (ok bool, err error) {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.cfg.MaxRecvBytes)),
		grpc.WithKeepaliveParams(c.cfg.Keepalive),
	}, append(WindowOptions(), c.cfg.DialOptions...)...)
	cc, err := grpc.NewClient(srv, opts...)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", srv, err)
	}
	defer cc.Close()
	defer c.conn.Store(nil) // runs before the Close above
	if err := waitReady(ctx, cc, c.cfg.ConnectTimeout); err != nil {
		return false, fmt.Errorf("connect %s: %w", srv, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.eng.startStream()
	start := c.cfg.Now()
	defer func() {
		if !ok && c.cfg.Now().Sub(start) >= c.cfg.ConfirmAfter {
			ok = true
		}
	}()
	if c.cfg.Mode == SotW {
		st, err := openStream[xdswire.DiscoveryRequest, xdswire.DiscoveryResponse](sctx, cc, sotwMethod)
		if err != nil {
			return false, fmt.Errorf("open sotw stream to %s: %w", srv, err)
		}
		return loop(sctx, c, srv, cc, st, c.eng.initialSotW(), c.eng.handleSotW)
	}
	st, err := openStream[xdswire.DeltaDiscoveryRequest, xdswire.DeltaDiscoveryResponse](sctx, cc, deltaMethod)
	if err != nil {
		return false, fmt.Errorf("open delta stream to %s: %w", srv, err)
	}
	return loop(sctx, c, srv, cc, st, c.eng.initialDelta(), c.eng.handleDelta)
}

func waitReady(ctx context.Context, cc *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc.Connect()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection %s", s)
		}
		if !cc.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// The ADS methods (envoy.service.discovery.v3.AggregatedDiscoveryService),
// called with the trimmed request and response types: the wire is the same as
// go-control-plane's generated client's.
const (
	adsService  = "envoy.service.discovery.v3.AggregatedDiscoveryService"
	sotwMethod  = "/" + adsService + "/StreamAggregatedResources"
	deltaMethod = "/" + adsService + "/DeltaAggregatedResources"
)

// adsDesc describes both ADS methods: bidirectional streams.
var adsDesc = grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// openStream opens one ADS stream of method on cc.
func openStream[Req, Resp any](ctx context.Context, cc *grpc.ClientConn, method string) (*grpc.GenericClientStream[Req, Resp], error) {
	cs, err := cc.NewStream(ctx, &adsDesc, method)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[Req, Resp]{ClientStream: cs}, nil
}

// adsStream is the part of a SotW or delta ADS stream the loop uses.
type adsStream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

// loop sends the initial requests, then answers each response with what handle
// returns. It is the stream's single owner goroutine.
func loop[Req, Resp any](ctx context.Context, c *Client, srv string, cc *grpc.ClientConn, st adsStream[Req, Resp], initial []Req, handle func(context.Context, Resp) []Req) (bool, error) {
	for _, r := range initial {
		if err := st.Send(r); err != nil {
			return false, fmt.Errorf("send to %s: %w", srv, err)
		}
	}
	c.streamUp(c.cfg.Now())
	c.publish(srv, true)
	got := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("recv from %s: %w", srv, err)
		}
		if !got {
			// A response means the server has opened the stream for our node.
			c.conn.Store(cc)
		}
		got = true
		reqs := handle(ctx, resp)
		c.afterResponse()
		c.publish(srv, true)
		for _, r := range reqs {
			if err := st.Send(r); err != nil {
				return got, fmt.Errorf("send to %s: %w", srv, err)
			}
		}
	}
}
