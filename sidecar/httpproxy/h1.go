package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
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
		return m.str(m.t0, m.t1), true
	case ":authority":
		if m.hostIdx < 0 {
			return "", false
		}
		f := m.fields[m.hostIdx]
		return m.str(int(f.vs), int(f.ve)), true
	}
	return m.get(n)
}

// maxDiscard is the largest unread request body drained to keep a connection alive
// after a local reply; larger bodies close the connection instead.
const maxDiscard = 64 << 10

func (p *Proxy) serveH1(ctx context.Context, conn net.Conn, br *bufio.Reader, t Target) {
	bw := p.getWriter(conn)
	st := h1states.Get().(*h1state)
	defer func() {
		conn.Close()
		p.putWriter(bw)
		h1states.Put(st)
	}()
	for ctx.Err() == nil {
		// The sniff already set a deadline for the first request.
		if err := st.req.readHead(br, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields); err != nil {
			switch {
			case errors.Is(err, errHeaderTooLarge):
				p.localReply(bw, st, http.StatusRequestHeaderFieldsTooLarge, "", err.Error(), true)
				p.observe("", st.code, time.Now())
			case errors.Is(err, errMalformed):
				p.localReply(bw, st, http.StatusBadRequest, "", err.Error(), true)
				p.observe("", st.code, time.Now())
			}
			return
		}
		if err := st.req.parseRequestLine(); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, errUnsupportedTE) {
				code = http.StatusNotImplemented
			}
			p.localReply(bw, st, code, "", err.Error(), true)
			p.observe("", st.code, time.Now())
			return
		}
		_ = conn.SetReadDeadline(time.Time{})
		var start time.Time
		if p.cfg.Observer != nil {
			start = time.Now()
		}
		st.cluster, st.code = "", 0
		var keep bool
		if which := p.admit(&t); which != "" {
			keep = p.overflowH1(br, bw, st, which)
		} else {
			keep = p.handleH1(ctx, br, bw, st, &t)
			t.Requests.Release()
		}
		p.observe(st.cluster, st.code, start)
		if !keep {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
		if _, err := br.Peek(1); err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
	}
}

// outcome of one upstream attempt.
type outcome uint8

const (
	done         outcome = iota // response forwarded (or the client went away)
	failConnect                 // no connection: retry/fallback allowed
	failReset                   // connection failed before a response
	failTimeout                 // per-try or route timeout before a response
	failStatus                  // retryable status read but not forwarded
	failOverflow                // circuit breaker refused
	failBodySent                // failed after the request body was consumed: no retry
	toPeer                      // picked a peer sidecar (st.peer): nothing sent, go over HTTP/2
)

// handleH1 proxies one request; false means close the client connection.
func (p *Proxy) handleH1(ctx context.Context, br *bufio.Reader, bw *bufio.Writer, st *h1state, t *Target) bool {
	req := &st.req
	cfg := t.Snapshot.Load() // the whole request runs on this snapshot
	host, _ := st.hdrs.Get(":authority")
	path := req.str(req.t0, req.t1)
	if req.upgrade {
		return p.discardAndReply(br, bw, st, http.StatusNotImplemented, "", "protocol upgrade is not supported")
	}
	rr := p.resolve(cfg, t, host, path, &st.hdrs)
	if rr.status != 0 {
		deg := ""
		if rr.status == http.StatusServiceUnavailable && p.cfg.Degraded != nil {
			deg = rr.reason
		}
		return p.discardAndReply(br, bw, st, rr.status, deg, rr.reason)
	}
	route := rr.route
	if route.Direct != nil {
		return p.discardAndReply(br, bw, st, int(route.Direct.Status), "", route.Direct.Body)
	}
	var deadline time.Time
	if route.Timeout > 0 {
		deadline = time.Now().Add(route.Timeout)
	}
	bodyless := req.contentLength <= 0 && !req.chunked
	c := route.Pick(p.cfg.Rand())
	st.cluster = c.Name
	if c.HTTP2 {
		return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, nil)
	}
	retries := 0
	if route.Retry != nil && bodyless {
		retries = route.Retry.NumRetries
	}
	fb := 0
	var last outcome
	for {
		var res outcome
		for attempt := 0; ; attempt++ {
			// Take the retry token before the attempt, so a retryable answer is only
			// dropped when a retry is certain to follow.
			retry := attempt < retries && c.Breaker.Acquire(circuitbreak.Retries)
			res = p.exchangeH1(ctx, br, bw, st, t, route, c, deadline, retry)
			if res == toPeer {
				// A peer sidecar's inbound listener speaks HTTP/2: the general path
				// takes over with the endpoint already picked (and its own retries).
				if retry {
					c.Breaker.Release(circuitbreak.Retries)
				}
				e := st.peer
				st.peer = nil
				return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, e)
			}
			again := retry && res != done && res != failBodySent && p.shouldRetry(route, res)
			if retry {
				c.Breaker.Release(circuitbreak.Retries)
			}
			if !again {
				break
			}
		}
		last = res
		if res == done {
			st.code = st.resp.status
			return !req.close && st.resp.status != 0 && !st.resp.close
		}
		// Fallback: next cluster in priority order while the request can be replayed.
		if res == failBodySent || fb >= len(route.Fallback) || (!bodyless && res != failConnect && res != failOverflow) {
			break
		}
		c = route.Fallback[fb]
		st.cluster = c.Name
		fb++
		if c.HTTP2 {
			return p.bridgeH1toH2(ctx, br, bw, st, t, route, c, nil)
		}
	}
	switch last {
	case failTimeout:
		p.timeoutH1(bw, st, route, deadline)
	case failOverflow:
		p.localReply(bw, st, http.StatusServiceUnavailable, "", "upstream overflow", true)
	default:
		p.localReply(bw, st, http.StatusServiceUnavailable, "", "upstream connect error or disconnect/reset before headers", true)
	}
	return false
}

func (p *Proxy) shouldRetry(r *dataplane.Route, res outcome) bool {
	if r.Retry == nil {
		return false
	}
	switch res {
	case failConnect, failOverflow:
		return r.Retry.RetryConnect(false)
	case failReset, failTimeout:
		return r.Retry.RetryConnect(true)
	case failStatus:
		return true
	}
	return false
}

// exchangeH1 sends the request to one endpoint of c and forwards the response.
func (p *Proxy) exchangeH1(ctx context.Context, cbr *bufio.Reader, cbw *bufio.Writer, st *h1state, t *Target,
	route *dataplane.Route, c *cluster.Cluster, deadline time.Time, mayRetry bool) outcome {
	req, resp := &st.req, &st.resp
	resp.reset()
	var hash uint64
	if c.Hashed {
		hash = requestHash(route, &st.hdrs, t.Source)
	}
	e, err := c.Pick(hash)
	if err != nil {
		return failConnect
	}
	if e.Peer {
		st.peer = e
		return toPeer
	}
	if !c.Breaker.Acquire(circuitbreak.Requests) {
		return failOverflow
	}
	defer c.Breaker.Release(circuitbreak.Requests)
	e.Begin()
	defer e.End()
	tryDeadline := deadline
	if route.Retry != nil && route.Retry.PerTryTimeout > 0 {
		if d := time.Now().Add(route.Retry.PerTryTimeout); tryDeadline.IsZero() || d.Before(tryDeadline) {
			tryDeadline = d
		}
	}
	bodyless := req.contentLength <= 0 && !req.chunked
	for stale := 0; ; stale++ {
		uc, reused, err := p.cfg.Pool.Get(ctx, c, e)
		if err != nil {
			if errors.Is(err, cluster.ErrOverflow) {
				return failOverflow
			}
			return failConnect
		}
		_ = uc.SetDeadline(tryDeadline)
		res, retryStale := p.roundTripH1(cbr, cbw, uc, req, resp, reused && stale == 0 && bodyless, route, mayRetry)
		if retryStale {
			uc.Close()
			continue // a pooled connection the peer had closed: one fresh try, not a retry
		}
		return res
	}
}

// roundTripH1 writes the request on uc and forwards the response. retryStale is set
// when a reused connection failed before any response byte and may be replaced.
func (p *Proxy) roundTripH1(cbr *bufio.Reader, cbw *bufio.Writer, uc *cluster.Conn, req, resp *msg, mayBeStale bool,
	route *dataplane.Route, mayRetry bool) (res outcome, retryStale bool) {
	w := uc.W
	w.Write(req.buf[req.m0:req.t1])
	w.WriteString(" HTTP/1.1\r\n")
	req.writeFields(w)
	w.WriteString("\r\n")
	bodyDone := req.contentLength <= 0 && !req.chunked
	if req.expect100 && !bodyDone {
		// The client waits for 100 Continue before sending the body: relay it.
		if err := w.Flush(); err != nil {
			return p.upstreamErr(uc, err, false), mayBeStale
		}
		if err := resp.readHead(uc.R, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields); err != nil {
			return p.upstreamErr(uc, err, false), mayBeStale
		}
		if err := resp.parseStatusLine(); err != nil {
			uc.Close()
			return failReset, false
		}
		if resp.status != http.StatusContinue {
			// Final answer without the body: forward it, then close (body state unknown).
			req.close = true
			return p.forwardResponse(cbw, uc, req, resp, route, false), false
		}
		cbw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := cbw.Flush(); err != nil {
			uc.Close()
			return done, false
		}
	}
	if !bodyDone {
		var err error
		if req.chunked {
			err = copyChunked(w, cbr)
		} else {
			err = copyN(w, cbr, req.contentLength)
		}
		if err != nil {
			uc.Close()
			req.close = true
			return failBodySent, false
		}
	}
	if err := w.Flush(); err != nil {
		return p.upstreamErr(uc, err, !bodyDone), mayBeStale && bodyDone
	}
	for {
		if err := resp.readHead(uc.R, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields); err != nil {
			stale := mayBeStale && (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err))
			return p.upstreamErr(uc, err, !bodyDone), stale
		}
		if err := resp.parseStatusLine(); err != nil {
			uc.Close()
			return failReset, false
		}
		if resp.status >= 200 {
			break
		}
		if resp.status == http.StatusSwitchingProtocols {
			uc.Close()
			return failReset, false
		}
		// 1xx informational (100, 103): relay and keep reading.
		cbw.WriteString("HTTP/1.1")
		cbw.Write(resp.buf[8:resp.start])
		cbw.WriteString("\r\n")
		resp.writeFields(cbw)
		cbw.WriteString("\r\n")
	}
	return p.forwardResponse(cbw, uc, req, resp, route, mayRetry), false
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

func (p *Proxy) upstreamErr(uc *cluster.Conn, err error, bodySent bool) outcome {
	uc.Close()
	if bodySent {
		return failBodySent
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return failTimeout
	}
	return failReset
}

// forwardResponse writes resp's head and body to the client and releases uc.
func (p *Proxy) forwardResponse(cbw *bufio.Writer, uc *cluster.Conn, req, resp *msg, route *dataplane.Route, canRetry bool) outcome {
	noBody := resp.status == http.StatusNoContent || resp.status == http.StatusNotModified ||
		(req.m1-req.m0 == 4 && string(req.buf[req.m0:req.m1]) == "HEAD")
	untilClose := !noBody && !resp.chunked && resp.contentLength < 0
	if canRetry && route.Retry != nil && route.Retry.RetryStatus(resp.status) {
		// Drop this response unread only if the caller still has attempts; it decides.
		// Draining keeps the connection; a long body is cheaper to close.
		if !noBody && !untilClose && !resp.chunked && resp.contentLength <= maxDiscard {
			if _, err := uc.R.Discard(int(resp.contentLength)); err == nil && !resp.close {
				p.cfg.Pool.Put(uc)
				return failStatus
			}
		}
		uc.Close()
		return failStatus
	}
	cbw.WriteString("HTTP/1.1")
	cbw.Write(resp.buf[8:resp.start])
	cbw.WriteString("\r\n")
	resp.writeFields(cbw)
	if req.close || untilClose {
		cbw.WriteString("Connection: close\r\n")
		req.close = true
	}
	cbw.WriteString("\r\n")
	var err error
	switch {
	case noBody:
	case resp.chunked:
		err = copyChunked(cbw, uc.R)
	case resp.contentLength > 0:
		err = copyN(cbw, uc.R, resp.contentLength)
	case untilClose:
		err = copyUntilEOF(cbw, uc.R)
		resp.close = true
	}
	if err == nil {
		err = cbw.Flush()
	}
	if err != nil || resp.close {
		uc.Close()
		req.close = true
		return done
	}
	_ = uc.SetDeadline(time.Time{})
	p.cfg.Pool.Put(uc)
	return done
}

// discardAndReply answers locally after consuming a small request body.
func (p *Proxy) discardAndReply(br *bufio.Reader, bw *bufio.Writer, st *h1state, code int, degraded, body string) bool {
	return p.discardAndReplyHeader(br, bw, st, code, degradedName(degraded), degraded, body)
}

// degradedName is the header a degraded reason goes in; "" when there is none.
func degradedName(degraded string) string {
	if degraded == "" {
		return ""
	}
	return DegradedHeader
}

// discardAndReplyHeader is discardAndReply with one header of the caller's
// (none when name is "").
func (p *Proxy) discardAndReplyHeader(br *bufio.Reader, bw *bufio.Writer, st *h1state, code int, name, value, body string) bool {
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
	p.writeReply(bw, st, code, name, value, body, closeAfter)
	return !closeAfter
}

// localReply writes a small plain-text response generated by the proxy.
// The cluster recorded for the request stays as it was: an upstream failure is
// counted against the cluster that failed.
func (p *Proxy) localReply(bw *bufio.Writer, st *h1state, code int, degraded, body string, closeConn bool) {
	p.writeReply(bw, st, code, degradedName(degraded), degraded, body, closeConn)
}

// writeReply is localReply with one header of the caller's (none when name is "").
func (p *Proxy) writeReply(bw *bufio.Writer, st *h1state, code int, name, value, body string, closeConn bool) {
	req := &st.req
	st.code = code
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(body) + 1))
	bw.WriteString("\r\n")
	if name != "" {
		bw.WriteString(name)
		bw.WriteString(": ")
		bw.WriteString(sanitizeHeader(value))
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
