package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// serveH2Request is the HTTP/2 server's handler: it finds the connection's Target.
func (p *Proxy) serveH2Request(w http.ResponseWriter, r *http.Request) {
	t, ok := r.Context().Value(targetKey{}).(*Target)
	if !ok {
		http.Error(w, "no target", http.StatusInternalServerError)
		return
	}
	p.serveHTTP(w, r, t)
}

// httpHeaders adapts an http.Request to route matching.
type httpHeaders struct{ r *http.Request }

func (h httpHeaders) Get(n string) (string, bool) {
	switch n {
	case ":method":
		return h.r.Method, true
	case ":authority":
		return h.r.Host, true
	case ":path":
		return h.r.URL.RequestURI(), true
	}
	v, ok := h.r.Header[http.CanonicalHeaderKey(n)]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

func isGRPC(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// serveHTTP is the general request path (HTTP/2 clients, HTTP/2 upstreams, gRPC).
func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request, t *Target) {
	var a answer
	start := time.Now()
	// Deferred so a stream aborted mid-body (panic ErrAbortHandler) is counted too.
	defer func() { p.observe(a.cluster, a.code, start) }()
	if which := p.admit(t); which != "" {
		w.Header().Set(OverflowHeader, which)
		a.code = p.errorReply(w, r, http.StatusServiceUnavailable, LocalOverflow, overflowBody(which))
		return
	}
	defer t.Requests.Release()
	cfg := t.Snapshot.Load() // the whole request runs on this snapshot
	h := httpHeaders{r: r}
	rr := p.resolve(cfg, t, r.Host, r.URL.RequestURI(), h, start)
	if rr.status != 0 {
		if rr.hdrName != "" {
			w.Header().Set(rr.hdrName, sanitizeHeader(rr.hdrValue))
		}
		a.code = p.errorReply(w, r, rr.status, rr.local, rr.reason)
		return
	}
	route := rr.route
	if route.Direct != nil {
		a.code = int(route.Direct.Status)
		w.Header().Set(LocalHeader, LocalDirect)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(a.code)
		io.WriteString(w, route.Direct.Body)
		return
	}
	c := route.Pick(p.cfg.Rand())
	if refused, wait := rateLimited(c, start); refused {
		a.cluster = c.Name
		a.code = p.rateLimitedH2(w, r, c, wait)
		return
	}
	p.forward(r.Context(), w, r, t, route, c, nil, 0, &a)
}

// answer is what a request was answered with, for the Observer.
type answer struct {
	cluster string // "" for the proxy's own answers before a cluster was picked
	code    int
}

// forward sends r to c (then retries and fallbacks) and streams the response back;
// reqCtx is r's context (the request's lifetime; r's own is not read).
// pin, when set, is the endpoint of c the first attempt goes to (already picked by
// the HTTP/1.1 path); later attempts pick again. prio is c's priority (0: one of
// the route's destinations, n: route.Fallback[n-1]); lower ones were tried. The
// caller took c's rate-limit token; forward takes each later fallback's.
// a receives the cluster tried last and the status sent.
func (p *Proxy) forward(reqCtx context.Context, w http.ResponseWriter, r *http.Request, t *Target, route *dataplane.Route, c *cluster.Cluster,
	pin *cluster.Endpoint, prio int, a *answer) {
	ctx := reqCtx
	stripHopByHop(r.Header, isGRPC(r))
	var cancel context.CancelFunc
	timeout := route.Timeout
	grpcTimeout := false // the client's grpc-timeout is the shorter bound
	if g, ok := parseGRPCTimeout(r.Header.Get("Grpc-Timeout")); ok && (timeout == 0 || g < timeout) {
		timeout, grpcTimeout = g, true
	}
	var deadline time.Time
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
		deadline, _ = ctx.Deadline()
	}
	// A body is kept for replay (up to the bound) only where a retry or a
	// fallback may need it.
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	var rb *replayBuf
	if hasBody {
		keep := route.Retry != nil && route.Retry.NumRetries > 0 || len(route.Fallback) > prio
		if keep && r.ContentLength > int64(p.cfg.MaxRetryBodyBytes) {
			keep = false
			p.retries.BodyNotBuffered[NotBufferedTooLarge].Add(1)
		}
		rb = p.newReplay(r.Body, keep)
		defer rb.done()
	}
	replayable := func() bool { return !hasBody || rb.replayable() }
	retries := 0
	if route.Retry != nil {
		retries = route.Retry.NumRetries
	}
	withPriority := len(route.Fallback) > 0
	var tm *time.Timer
	var last attemptResult
	limited, limitWait := false, time.Duration(0) // the last fallback's rate limit refused
	// A retry that answered holds its token to the end of its answer
	// (copyResponse panics when the stream is cut mid-body): one deferred
	// release, not one per attempt in the loop (that made tr and the defer
	// heap allocations on every request).
	var tr tries
	var answered *cluster.Cluster
	defer func() {
		if answered != nil {
			tr.release(answered)
		}
	}()
	for first := true; prio <= len(route.Fallback); prio, first = prio+1, false {
		if !first {
			c = route.Fallback[prio-1]
			// A fallback's Service spends a token of its own rate limit when the
			// request falls back to it (the caller checked c when first); refused,
			// the next fallback is tried, as for an overflow, and the last answers 429.
			if refused, wait := rateLimited(c, time.Now()); refused {
				if prio < len(route.Fallback) {
					continue
				}
				limited, limitWait = true, wait
				break
			}
		}
		a.cluster = c.Name
		tr.reset(retries, prio < len(route.Fallback))
		next := stepNone
		for {
			last = p.roundTrip(ctx, r, rb, t, route, c, pin, &tr)
			pin = nil
			if !replayable() {
				tr.retries, tr.fallback = 0, false
			}
			if last.resp != nil {
				resp := last.resp
				next = stepNone
				if gs, ok := grpcStatusOf(resp); ok {
					if failedGRPC(route, gs, tr.fallback) {
						next = p.decide(&tr, route, c, causeGRPC, gs, deadline)
					}
				} else if p.failedStatus(route, resp.StatusCode, tr.fallback) {
					next = p.decide(&tr, route, c, causeStatus, resp.StatusCode, deadline)
				}
				if next == stepNone {
					shown := -1
					if withPriority {
						shown = prio
					}
					p.countFallback(prio)
					a.code = resp.StatusCode
					answered = c
					p.copyResponse(w, resp, r.Method == http.MethodHead, shown)
					return
				}
				drain(resp)
			} else {
				if reqCtx.Err() != nil || deadlinePassed(ctx) {
					tr.release(c)
					next = stepNone
					break
				}
				next = p.decide(&tr, route, c, last.cause, 0, deadline)
			}
			if next != stepRetry {
				break
			}
			if !sleep(&tm, tr.wait, ctx.Done()) {
				tr.release(c)
				next = stepNone
				break
			}
			tr.attempt++
			p.retries.Retries.Add(1)
		}
		// A body not kept may still go to a fallback when nothing of it was sent.
		if next != stepFallback && !(last.resp == nil && last.unsent && prio < len(route.Fallback) && ctx.Err() == nil) {
			break
		}
	}
	if tm != nil {
		tm.Stop()
	}
	if limited {
		a.cluster = c.Name
		a.code = p.rateLimitedH2(w, r, c, limitWait)
		return
	}
	switch {
	case deadlinePassed(ctx) && reqCtx.Err() == nil:
		if grpcTimeout {
			w.Header().Set(TimeoutHeader, "grpc-timeout="+timeout.String())
		} else {
			w.Header().Set(TimeoutHeader, timeoutValue(route, true))
		}
		a.code = p.errorReply(w, r, http.StatusGatewayTimeout, LocalTimeout, "upstream request timeout")
	case last.cause == causeTimeout:
		w.Header().Set(TimeoutHeader, timeoutValue(route, false))
		a.code = p.errorReply(w, r, http.StatusGatewayTimeout, LocalTimeout, "upstream request timeout")
	case errors.Is(last.err, cluster.ErrOverflow):
		if l, ok := cluster.Overflowed(last.err); ok {
			w.Header().Set(OverflowHeader, l.String())
		}
		a.code = p.errorReply(w, r, http.StatusServiceUnavailable, LocalOverflow, "upstream overflow")
	case last.resp != nil: // dropped for a retry cut short, or a fallback that did not happen
		a.code = p.errorReply(w, r, last.resp.StatusCode, LocalRetries, "upstream failed after retries")
	default:
		a.code = p.errorReply(w, r, http.StatusServiceUnavailable, LocalUpstreamConnect, "upstream connect error or disconnect/reset before headers")
	}
}

// stripHopByHop makes h fit to go upstream over HTTP/1.1 or HTTP/2, once before
// the first attempt: hop-by-hop fields go, and TE stays only as "trailers"
// (all HTTP/2 allows; gRPC needs it end to end, so a gRPC request gets it).
func stripHopByHop(h http.Header, grpc bool) {
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Upgrade", "Transfer-Encoding"} {
		delete(h, k)
	}
	if te, ok := h["Te"]; grpc || ok {
		trailers := grpc
		for _, v := range te {
			trailers = trailers || v == "trailers"
		}
		if trailers {
			h["Te"] = []string{"trailers"}
		} else {
			delete(h, "Te")
		}
	}
}

// grpcStatusOf is the grpc-status of a trailers-only gRPC response (in its
// headers); false for any other response.
func grpcStatusOf(resp *http.Response) (int, bool) {
	v := resp.Header["Grpc-Status"]
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(v[0])
	return n, err == nil
}

// deadlinePassed reports whether ctx's deadline has been reached. The upstream
// connection carries the same deadline, so its i/o timeout can surface a moment
// before the context's own timer marks ctx done; checking the clock too keeps a
// route timeout a 504 rather than a connect-error 503.
func deadlinePassed(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// errNotSent marks failures before the request reached an upstream.
var errNotSent = errors.New("request not sent")

// attemptResult is one attempt of the general path: a response, or why none.
type attemptResult struct {
	resp   *http.Response
	err    error
	cause  retryCause // without resp
	noHost bool       // the cluster had no host to pick
	unsent bool       // nothing of the request left the sidecar
}

// roundTrip makes one attempt on c (on pin, else a host not in tr's tried ones
// when there is one) and reports its outcome to c's outlier detection.
func (p *Proxy) roundTrip(ctx context.Context, r *http.Request, rb *replayBuf, t *Target, route *dataplane.Route, c *cluster.Cluster,
	pin *cluster.Endpoint, tr *tries) attemptResult {
	e := pin
	if e == nil {
		var hash uint64
		if c.Hashed {
			hash = requestHash(route, httpHeaders{r: r}, t.Source)
		}
		var err error
		if e, err = p.pickEndpoint(c, hash, tr.triedHosts(), t); err != nil {
			return attemptResult{err: fmt.Errorf("%w: %w", errNotSent, err), cause: causeLocal, noHost: true, unsent: true}
		}
	}
	tr.add(e)
	if l, ok := c.Breaker.Admit(circuitbreak.Requests); !ok {
		return attemptResult{err: fmt.Errorf("%w: %w", errNotSent, &cluster.OverflowError{Cluster: c.Name, Limit: l}), cause: causeLocal, unsent: true}
	}
	e.Begin()
	tryCtx, cancel := ctx, context.CancelFunc(func() {})
	if route.Retry != nil && route.Retry.PerTryTimeout > 0 {
		tryCtx, cancel = context.WithTimeout(ctx, route.Retry.PerTryTimeout)
	}
	// A shallow copy: the header is r's, made fit for every attempt once by
	// forward (stripHopByHop) and not changed during them (an abandoned
	// attempt's transport may still read it). Cloning it was a tenth of the
	// peer hop's allocations.
	out := r.WithContext(tryCtx)
	u := *r.URL
	out.URL = &u
	out.RequestURI = ""
	out.URL.Scheme = "http"
	out.URL.Host = e.Address()
	out.Host = r.Host
	var body *replayReader
	switch {
	case rb != nil:
		body = rb.reader()
		out.Body = body
	case r.ContentLength == 0:
		out.Body = nil
	}
	var resp *http.Response
	var err error
	if c.HTTP2 || e.Peer {
		resp, err = p.roundTripH2(tryCtx, out, c, e)
	} else if out.Body == nil || out.ContentLength >= 0 {
		resp, err = p.roundTripPool(tryCtx, out, c, e)
	} else if e.TLS() != nil {
		// net/http's transport would dial it in plaintext: fail closed.
		err = fmt.Errorf("cluster %q: endpoint %s takes only mTLS, and a body of unknown length to an HTTP/1.1 upstream would go through net/http's plaintext transport: refused",
			c.Name, e.Address())
	} else {
		resp, err = p.h1std.RoundTrip(out) // a body of unknown length: net/http chunks it
	}
	if err != nil {
		// The connection's i/o timeout can surface a moment before tryCtx's timer
		// fires: deadlinePassed reads the clock too (a failure path only).
		perTry := deadlinePassed(tryCtx) && ctx.Err() == nil && !deadlinePassed(ctx)
		cancel()
		if body != nil {
			body.Close() // a transport still reading it stops taking the client's bytes
		}
		e.End()
		c.Breaker.Release(circuitbreak.Requests)
		res := attemptResult{err: err, cause: causeReset, unsent: errors.Is(err, errNotSent) && (rb == nil || rb.consumed() == 0)}
		switch {
		case errors.Is(err, cluster.ErrOverflow):
			res.cause = causeLocal
		case perTry:
			res.cause = causeTimeout
			c.Observe(e, outlier.Timeout)
		case deadlinePassed(ctx):
			c.Observe(e, outlier.Timeout) // the route timeout, as Envoy reports it
		case ctx.Err() != nil:
			// The client or a drain ended it: not the host's doing.
		case cluster.Unprocessed(err):
			res.cause = causeRefused // not the host's failure: nothing observed
		case errors.Is(err, errNotSent) && !errors.Is(err, errStaleConn):
			res.cause = causeConnect
			c.Observe(e, outlier.ConnectFailed)
		default:
			c.Observe(e, outlier.Reset)
		}
		return res
	}
	rbody := &releaseBody{ReadCloser: resp.Body, c: c, e: e, ctx: ctx, cancel: cancel}
	if gs := resp.Header["Grpc-Status"]; len(gs) > 0 {
		if o, ok := grpcOutcome(gs[0]); ok {
			c.Observe(e, o)
		}
	} else if resp.StatusCode == http.StatusOK && isGRPC(r) {
		rbody.trailers = resp // grpc-status comes in the trailers: observed at the end
	} else {
		c.Observe(e, outlier.Outcome(resp.StatusCode))
	}
	resp.Body = rbody
	return attemptResult{resp: resp}
}

// MaxUnprocessedRetries bounds how often one attempt is sent again on an HTTP/2
// connection from the pool after the peer refused it unprocessed (GOAWAY,
// REFUSED_STREAM): not a route retry, so it is bounded here.
const MaxUnprocessedRetries = 3

// roundTripH2 sends out on a pooled, multiplexed HTTP/2 connection to e. A request
// the peer never processed (cluster.Unprocessed) is sent again on a connection
// from the pool when it has no body to replay: that is not a route retry, only the
// connection's failure, like a stale keep-alive connection on HTTP/1.1.
func (p *Proxy) roundTripH2(ctx context.Context, out *http.Request, c *cluster.Cluster, e *cluster.Endpoint) (*http.Response, error) {
	replayable := out.Body == nil || out.Body == http.NoBody
	for try := 0; ; try++ {
		cc, err := p.h2.Get(ctx, c, e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		resp, err := cc.RoundTrip(out)
		if err == nil {
			return resp, nil
		}
		if !cluster.Unprocessed(err) {
			return nil, err
		}
		if !replayable || try == MaxUnprocessedRetries || ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
	}
}

// releaseBody ends the request's accounting when the response body is closed.
// For a gRPC response whose grpc-status comes in the trailers (trailers set), it
// reports that status, or a reset mid-body, to outlier detection then.
type releaseBody struct {
	io.ReadCloser
	once     sync.Once
	cancel   context.CancelFunc // the attempt's context
	c        *cluster.Cluster
	e        *cluster.Endpoint
	ctx      context.Context
	trailers *http.Response
	readErr  error // the first read error other than io.EOF
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.readErr == nil {
		b.readErr = err
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if t := b.trailers; t != nil && b.ctx.Err() == nil {
			if b.readErr != nil {
				b.c.Observe(b.e, outlier.Reset)
			} else if gs := t.Trailer["Grpc-Status"]; len(gs) > 0 {
				if o, ok := grpcOutcome(gs[0]); ok {
					b.c.Observe(b.e, o)
				}
			}
		}
		b.cancel()
		b.e.End()
		b.c.Breaker.Release(circuitbreak.Requests)
	})
	return err
}

func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDiscard)
	resp.Body.Close()
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyResponse streams resp to w, flushing as data arrives (gRPC streams) and passing
// trailers through. head says the request was HEAD (no body follows the head).
// prio >= 0 is sent as PriorityHeader, replacing any the upstream sent.
func (p *Proxy) copyResponse(w http.ResponseWriter, resp *http.Response, head bool, prio int) {
	defer resp.Body.Close()
	hdr := w.Header()
	for k, v := range resp.Header {
		switch k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Trailer", "Te":
			continue
		}
		hdr[k] = v
	}
	// Headers the upstream named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
	for _, v := range resp.Header["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				hdr.Del(tok)
			}
		}
	}
	for k := range resp.Trailer {
		hdr.Add("Trailer", k)
	}
	if prio >= 0 {
		hdr.Set(PriorityHeader, priorityValue(prio))
	}
	rc := http.NewResponseController(w)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	if n := resp.ContentLength; !head && n >= 0 && n <= int64(len(buf)) {
		// A small body of known length is read whole before the head goes out, so
		// head and body leave in one write (one h2 flush, one syscall) rather than
		// a flush each: per request, those writes were most of the CPU (pprof).
		if _, err := io.ReadFull(resp.Body, buf[:n]); err != nil {
			panic(http.ErrAbortHandler)
		}
		var one [1]byte
		if m, err := resp.Body.Read(one[:]); m > 0 || err != io.EOF {
			panic(http.ErrAbortHandler) // longer than announced, or reset before its end
		}
		w.WriteHeader(resp.StatusCode)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
		}
		for k, v := range resp.Trailer {
			hdr[http.TrailerPrefix+k] = v
		}
		return
	}
	w.WriteHeader(resp.StatusCode)
	// A gRPC trailers-only response (grpc-status in the headers) must leave as one
	// HEADERS frame with END_STREAM, so only flush once body data flows.
	if resp.Header.Get("Grpc-Status") == "" {
		_ = rc.Flush()
	}
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			if err != io.EOF {
				// Upstream reset mid-body: abort the client stream rather than end it cleanly.
				panic(http.ErrAbortHandler)
			}
			break
		}
	}
	for k, v := range resp.Trailer {
		hdr[http.TrailerPrefix+k] = v
	}
}

// errorReply answers locally, with x-weft-local set to local (and, for
// LocalDegraded, x-weft-degraded to msg); gRPC callers get a gRPC status instead of
// an HTTP error. It returns the HTTP status sent.
func (p *Proxy) errorReply(w http.ResponseWriter, r *http.Request, code int, local, msg string) int {
	w.Header().Set(LocalHeader, local)
	if local == LocalDegraded {
		w.Header().Set(DegradedHeader, sanitizeHeader(msg))
	}
	if isGRPC(r) {
		gs := "14" // UNAVAILABLE
		switch code {
		case http.StatusGatewayTimeout:
			gs = "4" // DEADLINE_EXCEEDED
		case http.StatusNotFound:
			gs = "12" // UNIMPLEMENTED
		case http.StatusForbidden:
			gs = "7" // PERMISSION_DENIED
		case http.StatusBadRequest:
			gs = "13" // INTERNAL (gRPC's HTTP-to-status mapping)
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", gs)
		w.Header().Set("Grpc-Message", url.PathEscape(msg))
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
	return code
}

// parseGRPCTimeout parses the grpc-timeout header ("100m", "5S", ...).
func parseGRPCTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// bridgeH1toH2 serves an HTTP/1.1 request whose cluster speaks HTTP/2, or whose
// picked endpoint is a peer sidecar, through the general path, writing the answer
// back as HTTP/1.1.
// pin, when set, is the (peer sidecar) endpoint the first attempt goes to; prio
// is c's priority (forward).
func (p *Proxy) bridgeH1toH2(ctx context.Context, br *bufio.Reader, bw *bufio.Writer, st *h1state, t *Target,
	route *dataplane.Route, c *cluster.Cluster, pin *cluster.Endpoint, prio int) bool {
	req := &st.req
	// One copy of the head, not views of req.buf: its strings outlive this
	// request inside the HTTP/2 client (HPACK's dynamic table keeps :path),
	// and req.buf is overwritten by the next request on this connection. A
	// view there once made the encoder index a later, equally long path as
	// the earlier one's table entry. Every string below is a substring of the
	// one copy (an allocation per field was a tenth of the bridged request's).
	head := string(req.buf)
	path := "/" // "http://host" means "/" (RFC 9112 §3.2.2)
	if !req.abs || req.u0 != req.u1 {
		path = head[req.u0:req.u1]
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return p.discardAndReply(br, bw, st, http.StatusBadRequest, LocalParser, "bad request target")
	}
	// RemoteAddr is left empty: a client request's is unused (the client
	// address travels as t.Source).
	hr := &http.Request{
		Method: head[req.m0:req.m1], URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(req.fields)), ContentLength: req.contentLength,
	}
	switch {
	case req.abs:
		hr.Host = head[req.a0:req.a1]
	case req.hostIdx >= 0:
		f := req.fields[req.hostIdx]
		hr.Host = head[f.vs:f.ve]
	}
	strs := make([]string, len(req.fields)) // the values' slices, one allocation
	for i, f := range req.fields {
		if req.isHopByHop(i) || i == req.hostIdx {
			continue
		}
		k := http.CanonicalHeaderKey(head[f.ns:f.ne]) // no copy when canonical or common
		v := head[f.vs:f.ve]
		if vv, ok := hr.Header[k]; ok {
			hr.Header[k] = append(vv, v)
		} else {
			strs[i] = v
			hr.Header[k] = strs[i : i+1 : i+1]
		}
	}
	if req.teIdx >= 0 {
		hr.Header.Set("Te", "trailers")
	}
	switch {
	case st.kept:
		// A copy: an abandoned attempt's transport may read it after st.body
		// went back to its pool.
		hr.Body = io.NopCloser(bytes.NewReader(bytes.Clone(*st.body)))
	case req.chunked:
		hr.ContentLength = -1
		hr.Body = io.NopCloser(&chunkedReader{r: br})
	case req.contentLength > 0:
		hr.Body = io.NopCloser(io.LimitReader(br, req.contentLength))
	default:
		hr.ContentLength = 0
		hr.Body = http.NoBody
	}
	w := &h1Writer{bw: bw, header: make(http.Header), head: req.m1-req.m0 == 4 && string(req.buf[req.m0:req.m1]) == "HEAD"}
	var a answer
	defer func() { st.cluster, st.code = a.cluster, a.code }()
	ok := func() (ok bool) {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				ok = false
			}
		}()
		p.forward(ctx, w, hr, t, route, c, pin, prio, &a) // ctx, not hr's: WithContext was a copy of hr per request
		return w.finish()
	}()
	if !st.kept && (req.chunked || req.contentLength > 0) {
		// Whatever the upstream left unread makes the connection unusable.
		if _, err := io.Copy(io.Discard, hr.Body); err != nil {
			return false
		}
	}
	return ok && !req.close
}

// h1Writer is an http.ResponseWriter that writes HTTP/1.1 (chunked when the length is
// unknown) onto a client connection.
type h1Writer struct {
	bw      *bufio.Writer
	header  http.Header
	wrote   bool
	chunked bool
	head    bool
	err     error
}

func (w *h1Writer) Header() http.Header { return w.header }

func (w *h1Writer) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if code >= 100 && code <= 999 {
		// The status line without fmt (per request on the bridged path).
		var line [16]byte
		b := append(line[:0], "HTTP/1.1 "...)
		b = strconv.AppendInt(b, int64(code), 10)
		b = append(b, ' ')
		w.bw.Write(b)
		w.bw.WriteString(http.StatusText(code))
		w.bw.WriteString("\r\n")
	} else {
		fmt.Fprintf(w.bw, "HTTP/1.1 %03d %s\r\n", code, http.StatusText(code))
	}
	if w.header.Get("Content-Length") == "" && !w.head && code != http.StatusNoContent && code != http.StatusNotModified {
		w.chunked = true
		w.header.Set("Transfer-Encoding", "chunked")
	}
	// Trailers (TrailerPrefix keys) are not part of the head; the map is
	// copied only when it has some.
	var trailers map[string]bool
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if trailers == nil {
				trailers = map[string]bool{}
			}
			trailers[k] = true
		}
	}
	w.err = w.header.WriteSubset(w.bw, trailers)
	w.bw.WriteString("\r\n")
}

func (w *h1Writer) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil || w.head || len(b) == 0 {
		return len(b), w.err
	}
	if w.chunked {
		var size [18]byte
		w.bw.Write(append(strconv.AppendInt(size[:0], int64(len(b)), 16), '\r', '\n'))
		w.bw.Write(b)
		_, w.err = w.bw.WriteString("\r\n")
	} else {
		_, w.err = w.bw.Write(b)
	}
	return len(b), w.err
}

func (w *h1Writer) Flush() { w.err = errors.Join(w.err, w.bw.Flush()) }

func (w *h1Writer) finish() bool {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked {
		w.bw.WriteString("0\r\n")
		for k, v := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, x := range v {
					fmt.Fprintf(w.bw, "%s: %s\r\n", name, x)
				}
			}
		}
		w.bw.WriteString("\r\n")
	}
	return w.err == nil && w.bw.Flush() == nil
}
