package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// h1state is the per-connection parse state, pooled so a keep-alive connection costs
// no allocation per request.
type h1state struct {
	req  msg
	resp msg
	hdrs reqHeaders
	peer *cluster.Endpoint // set with outcome toPeer; cleared by its reader
	// What the current request was answered with, for the Observer: set at every
	// response point, reset before each request.
	cluster string
	code    int
	upErr   error // why the upstream's response was rejected (outcome failProtocol)
	abort   bool  // reset the client connection: a close-delimited response failed mid-body
	out     countWriter
	conn    net.Conn // the client connection (an upgrade splices it)
	upgrade bool     // this request asks for a protocol switch the proxy forwards
	// up holds the upstream connection a request is using, per client connection
	// (not pooled with the state), so ending the connection's context can cut a
	// request stalled on its upstream (serveH1).
	up *atomic.Pointer[cluster.Conn]
	// Retries and fallback of the current request (retry.go).
	try        tries
	step       step               // what follows the failed status an attempt dropped
	prio       int                // the priority being tried; -1: the route has no fallbacks (no PriorityHeader)
	lastStatus int                // the failed status last dropped
	overflow   circuitbreak.Limit // the limit that refused, with outcome failOverflow
	kept       bool               // the request body is in body, for replay
	body       *[]byte            // from Proxy.bodies while kept
	timer      *time.Timer        // back-off waits, reused
}

// countWriter counts what reached the client connection, so a response that fails
// before any byte of it was sent can still be replaced by a 502.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

var h1states = sync.Pool{New: func() any {
	s := &h1state{}
	s.req.buf = make([]byte, 0, 1024)
	s.resp.buf = make([]byte, 0, 1024)
	s.req.fields = make([]field, 0, 16)
	s.resp.fields = make([]field, 0, 16)
	s.hdrs.m = &s.req
	return s
}}

// reqHeaders exposes the parsed request to route matching.
type reqHeaders struct{ m *msg }

func (h *reqHeaders) Get(n string) (string, bool) {
	m := h.m
	switch n {
	case ":method":
		return m.str(m.m0, m.m1), true
	case ":path":
		return m.path(), true
	case ":authority":
		return m.authority()
	}
	return m.get(n)
}

// maxDiscard is the largest unread request body drained to keep a connection alive
// after a local reply; larger bodies close the connection instead.
const maxDiscard = 64 << 10

func (p *Proxy) serveH1(ctx context.Context, conn net.Conn, br *bufio.Reader, t Target, dw *drainWatch, rd *readDeadline) {
	st := h1states.Get().(*h1state)
	st.out.w, st.conn = conn, conn
	bw := p.getWriter(&st.out)
	// When ctx ends (the listener's drain is over) a request waiting on its
	// upstream is cut there: closing the client connection alone would not wake
	// it. Per connection, not per request.
	up := &atomic.Pointer[cluster.Conn]{}
	st.up = up
	stopCut := context.AfterFunc(ctx, func() {
		if uc := up.Load(); uc != nil {
			_ = uc.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stopCut()
	defer func() {
		if l, ok := conn.(interface{ SetLinger(int) error }); ok && st.abort {
			_ = l.SetLinger(0) // close with a reset: the last response is incomplete
		}
		st.abort, st.out, st.conn = false, countWriter{}, nil
		conn.Close()
		p.putWriter(bw)
		h1states.Put(st)
	}()
	for ctx.Err() == nil {
		// The sniff already set a deadline for the first request.
		err := st.req.readHead(br, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields)
		if err == nil {
			err = st.req.parseRequestLine(p.cfg.MaxURIBytes)
		}
		if err != nil {
			if code := parseErrStatus(err); code != 0 {
				p.localReply(bw, st, code, LocalParser, err.Error(), true)
				p.observe("", st.code, time.Now())
			}
			return
		}
		// A request that reads nothing more from the client (no body, no upgrade)
		// keeps the idle deadline: it is moved after the answer anyway, and a read
		// deadline passing while nothing reads does nothing.
		if req := &st.req; req.contentLength > 0 || req.chunked || req.upgrade {
			rd.clear(conn)
		}
		draining := dw.busy() // a request read is served even if the listener drains
		// One clock read for the request's start (Observer, route deadline) and
		// one for its end (Observer, idle deadline).
		start := time.Now()
		st.cluster, st.code, st.upErr = "", 0, nil
		var keep bool
		if which := p.admit(&t); which != "" {
			keep = p.overflowH1(br, bw, st, which)
		} else {
			keep = p.handleH1(ctx, br, bw, st, &t, start)
			t.Requests.Release()
		}
		end := time.Now()
		p.observeAt(st.cluster, st.code, start, end)
		if !keep || draining || !dw.idleAgain(conn, rd, end, p.cfg.IdleTimeout) {
			return
		}
		if _, err := br.Peek(1); err != nil {
			return
		}
		if !headBuffered(br) {
			dw.readDeadline(conn, rd, time.Now().Add(p.cfg.ReadHeaderTimeout))
		}
	}
}

// parseErrStatus is the status answering a request that failed to parse; 0 when the
// client went away or timed out (nothing to answer).
func parseErrStatus(err error) int {
	switch {
	case errors.Is(err, errHeaderTooLarge):
		return http.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, errURITooLong):
		return http.StatusRequestURITooLong
	case errors.Is(err, errUnsupportedTE):
		return http.StatusNotImplemented
	case errors.Is(err, errMalformed):
		return http.StatusBadRequest
	}
	return 0
}

// outcome of one upstream attempt.
type outcome uint8

const (
	done         outcome = iota // response forwarded (or the client went away)
	failConnect                 // no connection: retry/fallback allowed
	failReset                   // connection failed before a response
	failTimeout                 // per-try or route timeout before a response
	failStatus                  // a failed status read and dropped: another attempt follows
	failOverflow                // circuit breaker refused
	failNoHost                  // the cluster has no endpoint to pick
	failBodySent                // failed after the (unkept) request body was consumed: no retry
	failProtocol                // the upstream's response is malformed (st.upErr): 502, no retry
	failBadBody                 // the client's request body is malformed (chunked framing): 400
	toPeer                      // picked a peer sidecar (st.peer): nothing sent, go over HTTP/2
)

// handleH1 proxies one request; false means close the client connection.
func (p *Proxy) handleH1(ctx context.Context, br *bufio.Reader, bw *bufio.Writer, st *h1state, t *Target, start time.Time) bool {
	req := &st.req
	cfg := t.Snapshot.Load() // the whole request runs on this snapshot
	host, _ := req.authority()
	path := req.path()
	st.upgrade = req.asksUpgrade()
	if req.m1-req.m0 == 7 && req.str(req.m0, req.m1) == "CONNECT" {
		return p.discardAndReply(br, bw, st, http.StatusNotImplemented, LocalParser, "CONNECT is not supported")
	}
	rr := p.resolve(cfg, t, host, path, &st.hdrs, start)
	if rr.status != 0 {
		if rr.hdrName != "" {
			return p.discardAndReplyHeader(br, bw, st, rr.status, rr.local, rr.hdrName, rr.hdrValue, rr.reason)
		}
		return p.discardAndReply(br, bw, st, rr.status, rr.local, rr.reason)
	}
	route := rr.route
	if route.Direct != nil {
		return p.discardAndReply(br, bw, st, int(route.Direct.Status), LocalDirect, route.Direct.Body)
	}
	var deadline time.Time
	if route.Timeout > 0 {
		deadline = start.Add(route.Timeout)
	}
	c := route.Pick(p.cfg.Rand())
	st.cluster = c.Name
	st.prio = -1
	if len(route.Fallback) > 0 {
		st.prio = 0
	}
	if refused, wait := rateLimited(c, start); refused {
		return p.rateLimitedH1(br, bw, st, c, wait)
	}
	if c.HTTP2 {
		if st.upgrade {
			return p.upgradeToH2(br, bw, st, c)
		}
		return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, nil, 0)
	}
	// A body is kept for replay only where a retry or fallback may need it.
	replay := req.contentLength <= 0 && !req.chunked
	if !replay && !st.upgrade && (route.Retry != nil && route.Retry.NumRetries > 0 || len(route.Fallback) > 0) {
		if req.chunked && !(req.expect100 && !req.http10) {
			// Its length is known only once it is read: the general path keeps
			// it while it streams (replayBuf), within the same bound.
			return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, nil, 0)
		}
		var ok bool
		if replay, ok = p.keepBodyH1(br, st); !ok {
			st.abort = false
			req.close = true
			return false // the client went away mid-body
		}
	}
	defer p.dropBodyH1(st)
	retries := 0
	if route.Retry != nil && replay {
		retries = route.Retry.NumRetries
	}
	var last outcome
	now := start // when the next attempt starts: its per-try timeout runs from it
	for prio := 0; ; prio++ {
		if prio > 0 {
			now = time.Now()
			c = route.Fallback[prio-1]
			st.cluster, st.prio = c.Name, prio
			// A fallback's Service spends a token of its own rate limit, taken
			// when the request falls back to it (now, already read); refused, the
			// next fallback is tried, as for an overflow, and the last answers 429.
			if refused, wait := rateLimited(c, now); refused {
				if prio < len(route.Fallback) {
					continue
				}
				return p.rateLimitedH1(br, bw, st, c, wait)
			}
			if c.HTTP2 {
				if st.upgrade {
					return p.upgradeToH2(br, bw, st, c)
				}
				return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, nil, prio)
			}
		}
		st.try.reset(retries, replay && prio < len(route.Fallback))
		res, next := p.tryClusterH1(ctx, br, bw, st, t, route, c, now, deadline)
		if res == toPeer {
			// A peer sidecar's inbound listener speaks HTTP/2: the general path
			// takes over with the endpoint already picked (and its own retries).
			e := st.peer
			st.peer = nil
			return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, e, prio)
		}
		last = res
		if res == done {
			st.code = st.resp.status
			// The upstream connection's fate (st.resp.close) is not the client's.
			return !req.close && st.resp.status != 0
		}
		// A body that was not kept may still go to a fallback when nothing of
		// it was sent.
		unsent := res == failConnect || res == failOverflow || res == failNoHost
		if next != stepFallback && (replay || !unsent || prio >= len(route.Fallback)) {
			break
		}
	}
	switch last {
	case failBadBody:
		p.localReply(bw, st, http.StatusBadRequest, LocalParser, "malformed chunked request body", true)
	case failTimeout:
		p.timeoutH1(bw, st, route, deadline)
	case failOverflow: // x-weft-overflow names the circuit-breaker limit (a constant string)
		// Nothing of the request was sent upstream: its body is either kept
		// (replay) or still unread, and a small unread one is discarded, so the
		// client connection stays open, as Envoy keeps it, and an overflow storm
		// does not become a reconnect storm.
		if !replay {
			return p.discardAndReplyHeader(br, bw, st, http.StatusServiceUnavailable, LocalOverflow, OverflowHeader, st.overflow.String(), "upstream overflow")
		}
		p.writeReply(bw, st, http.StatusServiceUnavailable, LocalOverflow, OverflowHeader, st.overflow.String(), "upstream overflow", req.close)
		return !req.close
	case failProtocol:
		p.localReply(bw, st, http.StatusBadGateway, LocalUpstreamProtocol, "invalid response from upstream: "+st.upErr.Error(), true)
	case failStatus: // dropped for a retry the connection's end then cut short
		p.localReply(bw, st, st.lastStatus, LocalRetries, "upstream failed after retries", true)
	default:
		p.localReply(bw, st, http.StatusServiceUnavailable, LocalUpstreamConnect, "upstream connect error or disconnect/reset before headers", true)
	}
	return false
}

// tryClusterH1 makes the attempts on c: the first, then the retries the route's
// policy, the breaker and the route timeout allow. next says whether the
// request goes on to the next priority.
func (p *Proxy) tryClusterH1(ctx context.Context, br *bufio.Reader, bw *bufio.Writer, st *h1state, t *Target,
	route *dataplane.Route, c *cluster.Cluster, now, deadline time.Time) (outcome, step) {
	for {
		// A retry's token is held through its attempt until decide judges it
		// (for a failed status, inside the exchange, before it is dropped).
		res, cause := p.exchangeH1(ctx, br, bw, st, t, route, c, now, deadline)
		var next step
		switch res {
		case done, toPeer, failBodySent, failProtocol, failBadBody:
			st.try.release(c)
			return res, stepNone
		case failStatus:
			next = st.step // decided before the response was dropped
		default:
			next = p.decide(&st.try, route, c, cause, 0, deadline)
		}
		if next != stepRetry {
			return res, next
		}
		if !sleep(&st.timer, st.try.wait, ctx.Done()) {
			st.try.release(c)
			return res, stepNone
		}
		st.try.attempt++
		p.retries.Retries.Add(1)
		now = time.Now()
	}
}

// exchangeH1 sends the request to one endpoint of c and forwards the response,
// or, when another attempt is to follow a failed status, drops it (st.step).
// now is when the attempt starts (the per-try timeout runs from it).
func (p *Proxy) exchangeH1(ctx context.Context, cbr *bufio.Reader, cbw *bufio.Writer, st *h1state, t *Target,
	route *dataplane.Route, c *cluster.Cluster, now, deadline time.Time) (outcome, retryCause) {
	req, resp := &st.req, &st.resp
	resp.reset()
	st.step = stepNone
	var hash uint64
	if c.Hashed {
		hash = requestHash(route, &st.hdrs, t.Source)
	}
	e, err := p.pickEndpoint(c, hash, st.try.triedHosts(), t)
	if err != nil {
		return failNoHost, causeLocal
	}
	st.try.add(e)
	// A peer sidecar's inbound listener also speaks HTTP/1.1: an upgrade goes to it
	// that way, since HTTP/2 has no upgrade without Extended CONNECT.
	if e.Peer && !st.upgrade {
		st.peer = e
		return toPeer, causeLocal
	}
	if l, ok := c.Breaker.Admit(circuitbreak.Requests); !ok {
		st.overflow = l
		return failOverflow, causeLocal
	}
	defer c.Breaker.Release(circuitbreak.Requests)
	e.Begin()
	defer e.End()
	tryDeadline := deadline
	if route.Retry != nil && route.Retry.PerTryTimeout > 0 {
		if d := now.Add(route.Retry.PerTryTimeout); tryDeadline.IsZero() || d.Before(tryDeadline) {
			tryDeadline = d
		}
	}
	replay := (req.contentLength <= 0 && !req.chunked) || st.kept
	defer st.up.Store(nil)
	for stale := 0; ; stale++ {
		uc, reused, err := p.cfg.Pool.Get(ctx, c, e)
		if err != nil {
			if l, ok := cluster.Overflowed(err); ok {
				st.overflow = l
				return failOverflow, causeLocal
			}
			if ctx.Err() == nil {
				c.Observe(e, outlier.ConnectFailed)
			}
			return failConnect, causeConnect
		}
		_ = uc.SetDeadline(tryDeadline)
		st.up.Store(uc)
		res, retryStale := p.roundTripH1(ctx, cbr, cbw, uc, st, reused && stale == 0 && replay, route, c, tryDeadline, deadline)
		if retryStale {
			uc.Close()
			continue // a pooled connection the peer had closed: one fresh try, not a retry
		}
		return res, p.observeH1(c, e, st, res, ctx)
	}
}

// observeH1 reports the attempt's outcome to c's outlier detection (see
// "Outcomes for outlier detection") and says what failed, for decide.
func (p *Proxy) observeH1(c *cluster.Cluster, e *cluster.Endpoint, st *h1state, res outcome, ctx context.Context) retryCause {
	switch res {
	case done, failStatus:
		if s := st.resp.status; s >= 100 {
			c.Observe(e, outlier.Outcome(s))
		}
		return causeStatus
	}
	if ctx.Err() != nil {
		return causeReset // a drain cut it: not the host's doing
	}
	switch res {
	case failTimeout:
		c.Observe(e, outlier.Timeout)
		return causeTimeout
	case failReset, failBodySent, failProtocol:
		c.Observe(e, outlier.Reset)
	}
	return causeReset
}

// keepBodyH1 reads a request body of known length, up to the replay bound, so
// every attempt can send it again (st.kept). false kept: the body is not kept
// (the reason counted) and goes once, from the connection. false ok: the client
// went away while sending it.
func (p *Proxy) keepBodyH1(br *bufio.Reader, st *h1state) (kept, ok bool) {
	req := &st.req
	switch {
	case req.expect100 && !req.http10:
		p.retries.BodyNotBuffered[NotBufferedExpect].Add(1)
		return false, true
	case req.contentLength > int64(p.cfg.MaxRetryBodyBytes):
		p.retries.BodyNotBuffered[NotBufferedTooLarge].Add(1)
		return false, true
	}
	bp := p.bodies.Get().(*[]byte)
	*bp = (*bp)[:req.contentLength]
	if _, err := io.ReadFull(br, *bp); err != nil {
		p.bodies.Put(bp)
		return false, false
	}
	st.body, st.kept = bp, true
	return true, true
}

// dropBodyH1 gives a kept body's buffer back.
func (p *Proxy) dropBodyH1(st *h1state) {
	if st.body != nil {
		p.bodies.Put(st.body)
		st.body, st.kept = nil, false
	}
}

// roundTripH1 writes the request on uc and forwards the response. retryStale is set
// when a reused connection failed before any response byte and may be replaced.
func (p *Proxy) roundTripH1(ctx context.Context, cbr *bufio.Reader, cbw *bufio.Writer, uc *cluster.Conn, st *h1state, mayBeStale bool,
	route *dataplane.Route, c *cluster.Cluster, tryDeadline, deadline time.Time) (res outcome, retryStale bool) {
	req, resp := &st.req, &st.resp
	w := uc.W
	req.writeRequestHeadKeep(w, st.upgrade)
	w.WriteString("\r\n")
	bodyDone := req.contentLength <= 0 && !req.chunked
	interim := 0
	// RFC 9110 §10.1.1: an HTTP/1.0 request's 100-continue expectation is ignored.
	if req.expect100 && !req.http10 && !bodyDone {
		// The client waits for 100 Continue before sending the body: relay the
		// upstream's, or send one when the upstream stays silent (it may not know
		// Expect and wait for the body itself).
		if err := w.Flush(); err != nil {
			return p.upstreamErr(uc, err, false), mayBeStale
		}
	wait:
		for {
			wait := time.Now().Add(p.cfg.ExpectContinueTimeout)
			own := tryDeadline.IsZero() || wait.Before(tryDeadline)
			if own {
				_ = uc.SetReadDeadline(wait)
			}
			_, err := uc.R.Peek(1)
			if own {
				_ = uc.SetReadDeadline(tryDeadline)
			}
			switch {
			case err != nil && own && errors.Is(err, os.ErrDeadlineExceeded):
				cbw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
				break wait
			case err != nil:
				return p.upstreamErr(uc, err, false), mayBeStale && !errors.Is(err, os.ErrDeadlineExceeded)
			}
			if res, ok := p.readUpstreamHead(uc, st, &interim); !ok {
				return res, false
			}
			switch {
			case resp.status == http.StatusContinue:
				if !p.relayInterim(cbw, st) {
					uc.Close()
					return done, false
				}
				break wait
			case resp.status >= 200:
				// A final answer before the body was asked for: the client's body is
				// still unsent, so neither connection can carry another message.
				req.close = true
				return p.forwardResponse(cbw, uc, st, route, c, deadline, false, false), false
			}
			if !p.relayInterim(cbw, st) {
				uc.Close()
				return done, false
			}
		}
		if err := cbw.Flush(); err != nil {
			uc.Close()
			req.close = true
			return done, false
		}
	}
	switch {
	case st.kept:
		w.Write(*st.body) // a failed write shows at the flush
	case !bodyDone:
		var err error
		if req.chunked {
			err = copyChunked(w, cbr)
		} else {
			err = copyN(w, cbr, req.contentLength)
		}
		if err != nil {
			uc.Close()
			req.close = true
			if errors.Is(err, errMalformed) {
				return failBadBody, false // the client's framing, not the upstream's fault
			}
			return failBodySent, false
		}
	}
	sent := !bodyDone && !st.kept // the client's body is consumed: it cannot go again
	if err := w.Flush(); err != nil {
		return p.upstreamErr(uc, err, sent), mayBeStale && !sent
	}
	// This first read is almost always EAGAIN before the netpoller's wait (the
	// upstream has not answered yet). Waiting first instead (a syscall.RawConn.Read
	// callback that declines its first call) loses answers: RawRead's prepareRead
	// resets the poller's readiness, so a response that arrived before the wait
	// is never signalled (tried: requests hung until their deadline). Done
	// without that race (the flush inside RawRead's first callback call, after
	// the reset, unless bytes of the request went out earlier: branch
	// h1-flushawait, cluster.Conn.FlushAwait) it saves the read but measured
	// slower, same run, AB_CONCURRENT=1 ALT_BIN=main's build, 3 rounds: CPU per
	// request 1.04x at 2,000 rps, 1.04x at saturation, max rps 0.98x; parking
	// sooner seems to cost more epoll_waits than the EAGAIN read it saves.
	for {
		_, err := uc.R.Peek(1)
		if err != nil {
			stale := mayBeStale && interim == 0 && (err == io.EOF || isReset(err))
			return p.upstreamErr(uc, err, sent), stale
		}
		if res, ok := p.readUpstreamHead(uc, st, &interim); !ok {
			return res, false
		}
		if resp.status >= 200 {
			break
		}
		if resp.status == http.StatusSwitchingProtocols {
			return p.switchProtocols(ctx, cbr, cbw, uc, st), false
		}
		// 1xx informational (100, 103): relay now and keep reading for the final one.
		if !p.relayInterim(cbw, st) {
			uc.Close()
			req.close = true
			return done, false
		}
	}
	return p.forwardResponse(cbw, uc, st, route, c, deadline, true, true), false
}

// MaxInterimResponses bounds the 1xx responses relayed before a final one; an
// upstream sending more is answered 502 (net/http's client accepts 5; a proxy
// relays what its clients may expect, Early Hints and 100 Continue among them).
const MaxInterimResponses = 16

// readUpstreamHead reads and checks one response head into st.resp. A malformed head
// closes uc and yields failProtocol with st.upErr naming the problem; a 101 here is
// accepted only for a request that asked to upgrade.
func (p *Proxy) readUpstreamHead(uc *cluster.Conn, st *h1state, interim *int) (outcome, bool) {
	resp := &st.resp
	err := resp.readHead(uc.R, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields)
	if err == nil {
		err = resp.parseStatusLine()
	}
	switch {
	case err == nil:
	case errors.Is(err, errURITooLong): // the reader's name for an over-long start line
		st.upErr = fmt.Errorf("%w: status line longer than %d bytes", errHeaderTooLarge, uc.R.Size())
		uc.Close()
		return failProtocol, false
	case errors.Is(err, errMalformed) || errors.Is(err, errHeaderTooLarge) || errors.Is(err, errUnsupportedTE):
		st.upErr = err
		uc.Close()
		return failProtocol, false
	default: // cut or timed out mid-head: nothing was forwarded
		return p.upstreamErr(uc, err, false), false
	}
	if resp.status == http.StatusSwitchingProtocols {
		switch {
		case !st.upgrade:
			st.upErr = errors.New("101 Switching Protocols to a request that asked for no upgrade")
		case !resp.upgrade:
			st.upErr = errors.New("101 Switching Protocols without Upgrade")
		default:
			return done, true
		}
		uc.Close()
		return failProtocol, false
	}
	if resp.status < 200 {
		if *interim++; *interim > MaxInterimResponses {
			st.upErr = fmt.Errorf("more than %d interim (1xx) responses", MaxInterimResponses)
			uc.Close()
			return failProtocol, false
		}
	}
	return done, true
}

// relayInterim forwards the 1xx head in st.resp at once (Early Hints are worth
// something only before the final response); an HTTP/1.0 client gets none (RFC 9110
// §15.2). false: the client went away.
func (p *Proxy) relayInterim(cbw *bufio.Writer, st *h1state) bool {
	if st.req.http10 {
		return true
	}
	resp := &st.resp
	resp.chunked, resp.contentLength = false, -1 // a 1xx has no content
	cbw.WriteString("HTTP/1.1")
	cbw.Write(resp.buf[8:resp.start])
	cbw.WriteString("\r\n")
	resp.writeFields(cbw)
	cbw.WriteString("\r\n")
	return cbw.Flush() == nil
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

// upstreamErr closes uc and classifies its failure. A timeout is a timeout (504)
// whether or not the request body was sent: a request whose body was not kept is
// never retried, so failBodySent only marks resets after such a body.
func (p *Proxy) upstreamErr(uc *cluster.Conn, err error, bodySent bool) outcome {
	uc.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return failTimeout
	}
	if bodySent {
		return failBodySent
	}
	return failReset
}

func isHead(req *msg) bool { return req.m1-req.m0 == 4 && string(req.buf[req.m0:req.m1]) == "HEAD" }

// forwardResponse writes the head and body of st.resp to the client and releases uc:
// back to the pool only when reusable, the message ended exactly where its framing
// says and nothing more arrived.
// canDrop allows a failed status to be dropped for another attempt (decide).
func (p *Proxy) forwardResponse(cbw *bufio.Writer, uc *cluster.Conn, st *h1state, route *dataplane.Route, c *cluster.Cluster,
	deadline time.Time, canDrop, reusable bool) outcome {
	req, resp := &st.req, &st.resp
	fr := resp.responseFraming(isHead(req))
	noBody := fr == noContent
	chunked, n := resp.chunked, resp.contentLength
	untilClose := fr == closeContent
	if resp.status == http.StatusNoContent && (chunked || n > 0) {
		// A 204 announcing content: whatever follows cannot be trusted as the next
		// response. Deliver the 204, then discard the connection.
		reusable = false
	}
	reusable = reusable && !resp.close && !untilClose
	if canDrop && p.failedStatus(route, resp.status, st.try.fallback) && p.decideStatus(st, route, c, deadline) {
		// Another attempt follows: drop this response.
		// Draining keeps the connection; a long body is cheaper to close.
		st.lastStatus = resp.status
		if reusable && (noBody || (!chunked && n <= maxDiscard)) {
			if noBody || n <= 0 {
				p.release(uc)
				return failStatus
			}
			if _, err := uc.R.Discard(int(n)); err == nil {
				p.release(uc)
				return failStatus
			}
		}
		uc.Close()
		return failStatus
	}
	// An HTTP/1.0 client cannot read chunked: it gets the content, delimited by close.
	dechunk := chunked && !noBody && req.http10
	switch {
	case resp.status == http.StatusNoContent:
		resp.chunked, resp.contentLength = false, -1 // RFC 9110 §8.6: no Content-Length on a 204
	case noBody || dechunk:
		resp.chunked = false // HEAD and 304 keep Content-Length: it describes the representation
	}
	sent := st.out.n
	cbw.WriteString("HTTP/1.1")
	cbw.Write(resp.buf[8:resp.start])
	cbw.WriteString("\r\n")
	if st.prio >= 0 {
		resp.writeFieldsExcept(cbw, false, PriorityHeader) // the sidecar's own, below
	} else {
		resp.writeFields(cbw)
	}
	resp.chunked, resp.contentLength = chunked, n
	if st.prio >= 0 {
		p.countFallback(st.prio) // before the client can see the answer
		cbw.WriteString(PriorityHeader + ": ")
		cbw.WriteString(priorityValue(st.prio))
		cbw.WriteString("\r\n")
	}
	if req.close || untilClose || dechunk {
		cbw.WriteString("Connection: close\r\n")
		req.close = true
	} else if req.http10 {
		cbw.WriteString("Connection: keep-alive\r\n") // an HTTP/1.0 client asked for it
	}
	cbw.WriteString("\r\n")
	err := copyResponseBody(cbw, uc.R, fr, n, dechunk)
	if err != nil && st.out.n == sent && errors.Is(err, errMalformed) {
		// Nothing reached the client yet (the bad chunk came with the head): drop
		// what is buffered and answer 502 instead.
		cbw.Reset(&st.out)
		uc.Close()
		st.upErr = fmt.Errorf("response body: %w", err)
		return failProtocol
	}
	if err == nil {
		// The upstream's message is complete: release its connection before the
		// client's last flush, so it is pooled by the time the client has the answer.
		if reusable {
			p.release(uc)
		} else {
			uc.Close()
		}
		if err = cbw.Flush(); err != nil {
			req.close = true
		}
		return done
	}
	// Mid-body: the head is sent, so no status can tell the client. Close its
	// connection: a short length-delimited or unterminated chunked body shows as
	// truncated; a close-delimited one would not, so that connection is reset.
	uc.Close()
	req.close = true
	st.abort = untilClose || dechunk
	return done
}

// release gives a connection whose message ended back to the pool (which closes it
// if bytes past the message are buffered). Its deadline stays: the next Get's
// caller sets its own (cluster.Pool.Get).
func (p *Proxy) release(uc *cluster.Conn) {
	p.cfg.Pool.Put(uc)
}

// upgradeToH2 refuses a protocol switch to an HTTP/2-only cluster: that needs
// Extended CONNECT (RFC 8441), which the proxy does not speak.
func (p *Proxy) upgradeToH2(br *bufio.Reader, bw *bufio.Writer, st *h1state, c *cluster.Cluster) bool {
	return p.discardAndReply(br, bw, st, http.StatusNotImplemented, LocalParser,
		"protocol upgrade to HTTP/2 cluster "+c.Name+" is not supported (no Extended CONNECT)")
}

// discardAndReply answers locally after consuming a small request body.
func (p *Proxy) discardAndReply(br *bufio.Reader, bw *bufio.Writer, st *h1state, code int, local, body string) bool {
	return p.discardAndReplyHeader(br, bw, st, code, local, degradedName(local, body), body, body)
}

// degradedName is the header a degraded reason goes in; "" for other answers.
func degradedName(local, reason string) string {
	if local != LocalDegraded || reason == "" {
		return ""
	}
	return DegradedHeader
}

// discardAndReplyHeader is discardAndReply with one header of the caller's
// (none when name is "").
func (p *Proxy) discardAndReplyHeader(br *bufio.Reader, bw *bufio.Writer, st *h1state, code int, local, name, value, body string) bool {
	return p.discardAndReplyHeaders(br, bw, st, code, local, body, name, value)
}

// discardAndReplyHeaders is discardAndReply with the caller's headers (name,
// value pairs; a pair whose name is "" is left out).
func (p *Proxy) discardAndReplyHeaders(br *bufio.Reader, bw *bufio.Writer, st *h1state, code int, local, body string, hdrs ...string) bool {
	req := &st.req
	closeAfter := req.close
	switch {
	case req.chunked || req.contentLength > maxDiscard || req.expect100:
		closeAfter = true
	case req.contentLength > 0:
		if _, err := br.Discard(int(req.contentLength)); err != nil {
			closeAfter = true
		}
	}
	p.writeReplyHeaders(bw, st, code, local, body, closeAfter, hdrs...)
	return !closeAfter
}

// localReply writes a small plain-text response generated by the proxy, with
// x-weft-local naming the part that answered (local, one of the Local* values) and,
// for LocalDegraded, x-weft-degraded carrying the reason (body).
// The cluster recorded for the request stays as it was: an upstream failure is
// counted against the cluster that failed.
func (p *Proxy) localReply(bw *bufio.Writer, st *h1state, code int, local, body string, closeConn bool) {
	p.writeReply(bw, st, code, local, degradedName(local, body), body, body, closeConn)
}

// writeReply is localReply with one header of the caller's (none when name is "").
func (p *Proxy) writeReply(bw *bufio.Writer, st *h1state, code int, local, name, value, body string, closeConn bool) {
	p.writeReplyHeaders(bw, st, code, local, body, closeConn, name, value)
}

// writeReplyHeaders is localReply with the caller's headers: name, value pairs,
// a pair whose name is "" left out. (The variadic slice stays on the stack.)
func (p *Proxy) writeReplyHeaders(bw *bufio.Writer, st *h1state, code int, local, body string, closeConn bool, hdrs ...string) {
	req := &st.req
	st.code = code
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(body) + 1))
	bw.WriteString("\r\n" + LocalHeader + ": ")
	bw.WriteString(local)
	bw.WriteString("\r\n")
	for i := 0; i+1 < len(hdrs); i += 2 {
		if hdrs[i] == "" {
			continue
		}
		bw.WriteString(hdrs[i])
		bw.WriteString(": ")
		bw.WriteString(sanitizeHeader(hdrs[i+1]))
		bw.WriteString("\r\n")
	}
	if closeConn {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	bw.WriteString(body)
	bw.WriteByte('\n')
	_ = bw.Flush()
	req.close = req.close || closeConn
}

// sanitizeHeader keeps a header value on one line.
func sanitizeHeader(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			b := []byte(s)
			for j := range b {
				if b[j] < 0x20 || b[j] == 0x7f {
					b[j] = ' '
				}
			}
			return string(b)
		}
	}
	return s
}
