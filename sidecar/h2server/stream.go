package h2server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/sidecar/h2flow"
)

// stream is one request. Fields under "c.mu" are shared between the reader
// and the handler; the response writer is the handler's alone.
type stream struct {
	c       *conn
	id      uint32
	req     *http.Request
	handler http.Handler
	ctx     context.Context
	cancel  context.CancelFunc
	rb      requestBody
	rw      responseWriter
	// needsContinue: the request sent "Expect: 100-continue"; the first body
	// read sends 100 Continue (handler-owned).
	needsContinue bool

	// Under c.mu.
	sendWin     int64
	inflow      h2flow.Inflow
	remoteDone  bool  // END_STREAM received
	localDone   bool  // the response's END_STREAM went out (or the handler is done)
	resetSent   bool  // RST_STREAM went out
	ended       bool  // reset either way, or the connection ended
	endErr      error // why ended
	gotTrailers bool
	declLen     int64 // the request's content-length, -1 none
	gotLen      int64 // DATA payload received
	body        []byte
	boff        int   // read offset in body
	bodyErr     error // after body is read: io.EOF or why it broke
	bodyCond    sync.Cond
	bodyClosed  bool        // the handler closed the body
	trailer     http.Header // trailers received, when the request declared some
	committed   int64       // this stream's share of conn.streamCommitted
}

// commitmentLocked is what st holds of its body unread plus the credit its client
// may still use (Server.BodyBytesCommitted).
func (st *stream) commitmentLocked() int64 {
	n := int64(len(st.body) - st.boff)
	if !st.remoteDone && !st.bodyClosed && !st.ended {
		more := int64(st.inflow.Avail)
		if st.declLen >= 0 {
			more = min(more, st.declLen-st.gotLen)
		}
		n += max(more, 0)
	}
	return n
}

// endLocked ends st at once: its context, its body (after what is buffered)
// and its writes.
func (st *stream) endLocked(err error) {
	if st.ended {
		return
	}
	st.ended, st.endErr = true, err
	defer st.c.recommitLocked(st)
	st.endBodyLocked(err)
	if st.cancel != nil {
		st.cancel()
	}
}

func (st *stream) endBodyLocked(err error) {
	if st.bodyErr == nil {
		st.bodyErr = err
	}
	st.bodyCond.Broadcast()
}

// run serves the request on a worker goroutine and ends the stream.
func (st *stream) run() {
	c := st.c
	defer c.handlers.Done()
	w := &st.rw
	w.st, w.declLen, w.head = st, -1, st.req.Method == http.MethodHead
	aborted := false
	func() {
		defer func() {
			if v := recover(); v != nil {
				aborted = true
				if v != http.ErrAbortHandler {
					c.srv.logf("h2server: panic serving %s stream %d: %v", c.remoteAddr, st.id, v)
				}
			}
		}()
		st.handler.ServeHTTP(w, st.req)
	}()
	reset := false
	if (aborted || w.finish() != nil) && !st.isEnded() {
		c.resetStream(st.id, http2.ErrCodeInternal)
		reset = true
	}
	w.release()
	c.mu.Lock()
	st.localDone = true
	open := !st.remoteDone && !st.ended
	if st.remoteDone {
		c.removeStreamLocked(st)
	}
	c.mu.Unlock()
	if open {
		// Answered before the request's end: the rest is not wanted (RFC 9113 §8.1).
		c.resetStream(st.id, http2.ErrCodeNo)
	}
	if open || reset {
		// resetStream leaves its frame for the reader's next flush, which waits
		// for the client's next frame: a client told nothing would go on sending.
		c.flushPending()
	}
	st.cancel()
}

// requestBody is a request's Body.
type requestBody struct{ st *stream }

func (b *requestBody) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	if st.needsContinue {
		st.needsContinue = false
		c.wmu.Lock()
		if c.wErr == nil {
			c.hbuf.Reset()
			_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "100"})
			c.writeBlockLocked(st.id, false, c.peerMaxFrameSize())
			c.wErr = errors.Join(c.wErr, c.bw.Flush())
			c.pending = false
		}
		c.wmu.Unlock()
	}
	c.mu.Lock()
	for len(st.body) == st.boff && st.bodyErr == nil {
		st.bodyCond.Wait()
	}
	if len(st.body) == st.boff {
		err := st.bodyErr
		if err == io.EOF {
			for k, vv := range st.trailer {
				if _, ok := st.req.Trailer[k]; ok {
					st.req.Trailer[k] = vv
				}
			}
		}
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, st.body[st.boff:])
	st.boff += n
	if st.boff == len(st.body) {
		st.body, st.boff = st.body[:0], 0
	}
	var su int32
	if !st.remoteDone {
		su = st.inflow.Add(n)
	}
	cu := c.inflow.Add(n)
	c.recommitLocked(st)
	c.mu.Unlock()
	if su > 0 || cu > 0 {
		c.sendWindowUpdates(st.id, su, cu, true) // the client may be waiting for it
	}
	return n, nil
}

// Close discards what is unread (its connection credit goes back); later DATA
// is dropped.
func (b *requestBody) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	if st.bodyClosed {
		c.mu.Unlock()
		return nil
	}
	st.bodyClosed = true
	n := len(st.body) - st.boff
	st.body, st.boff = nil, 0
	if st.bodyErr == nil {
		st.bodyErr = errBodyClosed
	}
	var cu int32
	if n > 0 {
		cu = c.inflow.Add(n)
	}
	c.recommitLocked(st)
	c.mu.Unlock()
	if cu > 0 {
		c.sendWindowUpdates(0, 0, cu, true)
	}
	return nil
}

// responseWriter is a request's http.ResponseWriter (and http.Flusher).
type responseWriter struct {
	st          *stream
	header      http.Header
	status      int
	wroteHeader bool // the final status was set
	sentHeader  bool // its HEADERS went out
	ended       bool // END_STREAM went out
	buf         *[]byte
	written     int64
	declLen     int64
	head        bool
	noBody      bool // the status allows no body
}

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h2server: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// Informational: its HEADERS go out now; the final status follows.
		w.writeInformational(code)
		return
	}
	w.wroteHeader, w.status = true, code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := w.header["Content-Length"]; len(v) > 0 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.declLen = n
		}
	}
}

func (w *responseWriter) writeInformational(code int) {
	c := w.st.c
	maxFrame := c.peerMaxFrameSize()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wErr != nil || w.st.isEnded() {
		return
	}
	c.encodeHeader(code, w.header, "", nil)
	c.writeBlockLocked(w.st.id, false, maxFrame)
	c.wErr = errors.Join(c.wErr, c.bw.Flush())
	c.pending = false
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declLen >= 0 && w.written+int64(len(p)) > w.declLen {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.head || len(p) == 0 {
		return len(p), nil
	}
	limit := w.st.c.srv.cfg.ResponseBufferBytes
	if w.buf == nil {
		w.buf = w.st.c.srv.getBuf(limit)
	}
	if len(*w.buf)+len(p) <= limit {
		*w.buf = append(*w.buf, p...)
		return len(p), nil
	}
	if err := w.send(*w.buf, false, false); err != nil {
		return 0, err
	}
	*w.buf = (*w.buf)[:0]
	if err := w.send(p, false, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *responseWriter) WriteString(s string) (int, error) {
	return w.Write([]byte(s)) // only local answers write strings
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError sends the headers and what is buffered now.
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	var p []byte
	if w.buf != nil {
		p = *w.buf
	}
	err := w.send(p, false, true)
	if w.buf != nil {
		*w.buf = (*w.buf)[:0]
	}
	return err
}

// finish ends the response after the handler returned.
func (w *responseWriter) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	var p []byte
	if w.buf != nil {
		p = *w.buf
	}
	if w.declLen >= 0 && w.written < w.declLen && !w.head {
		return http.ErrContentLength // shorter than announced: reset, not a clean end
	}
	return w.send(p, true, true)
}

func (w *responseWriter) release() {
	if w.buf != nil {
		w.st.c.srv.putBuf(w.buf)
		w.buf = nil
	}
}

func (st *stream) isEnded() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.ended
}

// send writes the HEADERS (when not sent yet), then p as DATA, then (end) the
// trailers or END_STREAM, waiting on the client's windows; flush sends it all.
func (w *responseWriter) send(p []byte, end, flush bool) error {
	st := w.st
	c := st.c
	if w.ended {
		return errStreamClosed
	}
	var trailers bool
	if end {
		trailers = hasTrailers(w.header)
	}
	for {
		n, maxFrame, err := c.takeWindow(st, len(p))
		if err != nil {
			return err
		}
		c.wmu.Lock()
		if c.wErr != nil {
			err := c.wErr
			c.wmu.Unlock()
			return err
		}
		if st.isEnded() {
			c.wmu.Unlock()
			return errStreamClosed
		}
		chunk := p[:n]
		p = p[n:]
		last := end && len(p) == 0 // END_STREAM goes out in this round
		if !w.sentHeader {
			cl := ""
			if end && len(p) == 0 && w.declLen < 0 && !trailers && !w.noBody && (len(chunk) > 0 || !w.head) {
				cl = strconv.Itoa(len(chunk)) // the whole body is known: say its length
			}
			c.encodeHeader(w.status, w.header, cl, declaredTrailers(w.header))
			c.writeBlockLocked(st.id, last && !trailers && len(chunk) == 0, maxFrame)
			w.sentHeader = true
			if last && !trailers && len(chunk) == 0 {
				w.ended = true
			}
		}
		for len(chunk) > 0 {
			m := min(len(chunk), maxFrame)
			if err := c.fr.WriteData(st.id, last && !trailers && m == len(chunk), chunk[:m]); err != nil {
				c.wErr = err
			}
			chunk = chunk[m:]
			if last && !trailers && len(chunk) == 0 {
				w.ended = true
			}
		}
		if last && !w.ended {
			if trailers {
				c.encodeTrailers(w.header)
				c.writeBlockLocked(st.id, true, maxFrame)
			} else if err := c.fr.WriteData(st.id, true, nil); err != nil {
				c.wErr = err
			}
			w.ended = true
		}
		if len(p) == 0 && flush {
			if err := c.bw.Flush(); err != nil && c.wErr == nil {
				c.wErr = err
			}
			c.pending = false
		} else {
			c.pending = true
		}
		err = c.wErr
		c.wmu.Unlock()
		if err != nil || len(p) == 0 {
			return err
		}
	}
}

// takeWindow takes up to want bytes of both send windows, waiting while either
// is empty (after flushing, so the client sees what it is to answer). want 0
// takes nothing. It also returns the client's largest frame.
func (c *conn) takeWindow(st *stream, want int) (int, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	flushed := false
	for {
		if st.ended {
			return 0, 0, errStreamClosed
		}
		if c.closing {
			return 0, 0, errConnClosed
		}
		if want == 0 {
			return 0, c.peerMaxFrame, nil
		}
		if avail := min(c.sendWin, st.sendWin); avail > 0 {
			n := min(int64(want), avail)
			c.sendWin -= n
			st.sendWin -= n
			return int(n), c.peerMaxFrame, nil
		}
		if !flushed {
			c.mu.Unlock()
			c.flushPending()
			c.mu.Lock()
			flushed = true
			continue
		}
		c.winCond.Wait()
	}
}

func (c *conn) peerMaxFrameSize() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerMaxFrame
}

// writeBlockLocked writes the header block in c.hbuf as HEADERS and
// CONTINUATION frames of at most maxFrame bytes. Under wmu.
func (c *conn) writeBlockLocked(id uint32, end bool, maxFrame int) {
	block := c.hbuf.Bytes()
	first := block[:min(len(block), maxFrame)]
	rest := block[len(first):]
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(rest) == 0})
	for err == nil && len(rest) > 0 {
		frag := rest[:min(len(rest), maxFrame)]
		rest = rest[len(frag):]
		err = c.fr.WriteContinuation(id, len(rest) == 0, frag)
	}
	if err != nil && c.wErr == nil {
		c.wErr = err
	}
}

// encodeHeader encodes a response head into c.hbuf: fields that are not valid
// in HTTP/2 (connection-specific, bad names or values) are left out, as are
// trailers (TrailerPrefix and declared ones). Under wmu.
func (c *conn) encodeHeader(status int, h http.Header, contentLength string, declared []string) {
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || connectionSpecific(k) || containsFold(declared, k) {
			continue
		}
		c.encodeField(k, vv)
	}
	if contentLength != "" {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: contentLength})
	}
}

// encodeTrailers encodes the trailers of h (declared in "Trailer", or set with
// http.TrailerPrefix) into c.hbuf. Under wmu.
func (c *conn) encodeTrailers(h http.Header) {
	c.hbuf.Reset()
	for _, k := range declaredTrailers(h) {
		if vv := h[http.CanonicalHeaderKey(k)]; len(vv) > 0 && !connectionSpecific(k) {
			c.encodeField(k, vv)
		}
	}
	for k, vv := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && !connectionSpecific(name) {
			c.encodeField(name, vv)
		}
	}
}

func (c *conn) encodeField(k string, vv []string) {
	if !httpguts.ValidHeaderFieldName(k) {
		return
	}
	name := c.lowerKey(k)
	for _, v := range vv {
		if httpguts.ValidHeaderFieldValue(v) {
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
}

// hasTrailers reports whether h names trailers to send.
func hasTrailers(h http.Header) bool {
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || k == "Trailer" && len(vv) > 0 {
			return true
		}
	}
	return false
}

// declaredTrailers are the names listed in h's "Trailer" field (nil: none,
// without allocating).
func declaredTrailers(h http.Header) []string {
	vv := h["Trailer"]
	if len(vv) == 0 {
		return nil
	}
	var names []string
	for _, v := range vv {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	return names
}

func containsFold(names []string, k string) bool {
	for _, n := range names {
		if strings.EqualFold(n, k) {
			return true
		}
	}
	return false
}

// connectionSpecific: fields HTTP/2 forbids (RFC 9113 §8.2.2); "Te" is allowed
// only as "trailers", which a response has no use for.
func connectionSpecific(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te":
		return true
	}
	return false
}

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 404:
		return "404"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	case 504:
		return "504"
	}
	return strconv.Itoa(code)
}

// maxCachedKeys bounds each connection's field-name caches.
const maxCachedKeys = 128

// lowerKey is k as HTTP/2 writes it (lower case), cached per connection. Under wmu.
func (c *conn) lowerKey(k string) string {
	if v, ok := commonLower[k]; ok {
		return v
	}
	if v, ok := c.lower[k]; ok {
		return v
	}
	v := strings.ToLower(k)
	if c.lower == nil {
		c.lower = map[string]string{}
	}
	if len(c.lower) < maxCachedKeys {
		c.lower[k] = v
	}
	return v
}

// canonical is the http.Header key of a lower-case HTTP/2 field name, cached
// per connection. Reader-owned.
func (c *conn) canonical(name string) string {
	if v, ok := commonCanonical[name]; ok {
		return v
	}
	if v, ok := c.canon[name]; ok {
		return v
	}
	v := http.CanonicalHeaderKey(name)
	if c.canon == nil {
		c.canon = map[string]string{}
	}
	if len(c.canon) < maxCachedKeys {
		c.canon[name] = v
	}
	return v
}

// commonCanonical and commonLower map the usual field names both ways (read only).
var commonCanonical, commonLower = func() (map[string]string, map[string]string) {
	names := []string{"accept", "accept-charset", "accept-encoding", "accept-language", "accept-ranges",
		"age", "authorization", "cache-control", "content-disposition", "content-encoding", "content-language",
		"content-length", "content-location", "content-range", "content-type", "cookie", "date", "etag",
		"expect", "expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
		"if-unmodified-since", "last-modified", "link", "location", "max-forwards", "origin", "proxy-authenticate",
		"proxy-authorization", "range", "referer", "refresh", "retry-after", "server", "set-cookie",
		"strict-transport-security", "te", "trailer", "transfer-encoding", "user-agent", "vary", "via",
		"www-authenticate", "x-forwarded-for", "x-forwarded-proto", "x-request-id", "traceparent",
		"grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-status", "grpc-message",
		"x-weft-local", "x-weft-overflow", "x-weft-degraded", "x-weft-timeout", "x-weft-priority"}
	canon, lower := make(map[string]string, len(names)), make(map[string]string, len(names))
	for _, n := range names {
		k := http.CanonicalHeaderKey(n)
		canon[n], lower[k] = k, n
	}
	return canon, lower
}()

// validTrailer reports whether a request trailer may carry k (x/net/http2's
// rule: no framing, routing or authentication fields).
func validTrailer(k string) bool { return httpguts.ValidTrailerHeader(k) }

// newRequest validates a request's header block as x/net/http2's server does
// and builds its *http.Request; a malformed request is a stream error. The
// handler is Config.Handler, or one answering 431 when the header list was cut
// at MaxHeaderListSize.
func (c *conn) newRequest(st *stream, f *http2.MetaHeadersFrame) (*http.Request, http.Handler, error) {
	protoErr := http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	var method, scheme, authority, path, protocol string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":path":
			path = hf.Value
		case ":protocol":
			protocol = hf.Value
		}
	}
	if protocol != "" {
		return nil, nil, protoErr // extended CONNECT is not offered
	}
	isConnect := method == http.MethodConnect
	if isConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, nil, protoErr
		}
	} else if method == "" || path == "" || (scheme != "https" && scheme != "http") {
		return nil, nil, protoErr
	}
	regular := f.RegularFields()
	h := make(http.Header, len(regular))
	vals := make([]string, len(regular)) // one backing array for the usual one value per key
	for i, hf := range regular {
		k := c.canonical(hf.Name)
		if vv, ok := h[k]; ok {
			h[k] = append(vv, hf.Value)
		} else {
			vals[i] = hf.Value
			h[k] = vals[i : i+1 : i+1]
		}
	}
	if hosts := h["Host"]; len(hosts) == 1 {
		if authority == "" {
			authority = hosts[0]
		} else if hosts[0] != authority {
			return nil, nil, protoErr
		}
		delete(h, "Host")
	} else if len(hosts) > 1 {
		return nil, nil, protoErr
	}
	if strings.IndexByte(authority, '@') >= 0 && (scheme == "http" || scheme == "https") {
		return nil, nil, protoErr
	}
	if authority != "" && !httpguts.ValidHostHeader(authority) {
		return nil, nil, protoErr
	}
	if httpguts.HeaderValuesContainsToken(h["Expect"], "100-continue") {
		st.needsContinue = true
		delete(h, "Expect")
	}
	if cookies := h["Cookie"]; len(cookies) > 1 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	var trailer http.Header
	for _, v := range h["Trailer"] {
		for key := range strings.SplitSeq(v, ",") {
			key = http.CanonicalHeaderKey(strings.TrimSpace(key))
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
			default:
				if trailer == nil {
					trailer = make(http.Header)
				}
				trailer[key] = nil
			}
		}
	}
	delete(h, "Trailer")
	var u *url.URL
	requestURI := path
	if isConnect {
		u, requestURI = &url.URL{Host: authority}, authority
	} else {
		if path[0] != '/' && path != "*" {
			return nil, nil, protoErr
		}
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return nil, nil, protoErr
		}
	}
	var handler http.Handler = c.srv.cfg.Handler
	if f.Truncated {
		handler = http.HandlerFunc(headerListTooLong)
	} else if err := checkRequestFields(h); err != nil {
		// Deliberate: RFC 9113 §8.2.2's stream error, where x/net/http2 answers 400.
		return nil, nil, protoErr
	}
	var cl int64
	body := io.ReadCloser(http.NoBody)
	if !f.StreamEnded() {
		cl = -1
		if vv, ok := h["Content-Length"]; ok {
			cl = 0 // an unparsable one allows no DATA (as x/net/http2)
			if n, err := strconv.ParseUint(vv[0], 10, 63); err == nil {
				cl = int64(n)
			}
		}
		st.rb.st = st
		body = &st.rb
	}
	st.declLen = cl
	if trailer != nil {
		st.trailer = make(http.Header)
	}
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	req := (&http.Request{
		Method: method, URL: u, RemoteAddr: c.remoteAddr, Header: h, RequestURI: requestURI,
		Proto: "HTTP/2.0", ProtoMajor: 2, Host: authority, Body: body, ContentLength: cl, Trailer: trailer,
	}).WithContext(st.ctx)
	return req, handler, nil
}

// checkRequestFields refuses connection-specific fields and a TE other than
// "trailers" (RFC 9113 §8.2.2).
func checkRequestFields(h http.Header) error {
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"} {
		if _, ok := h[k]; ok {
			return errors.New("connection-specific field " + k)
		}
	}
	if te := h["Te"]; len(te) > 0 && (len(te) > 1 || (te[0] != "trailers" && te[0] != "")) {
		return errors.New(`TE other than "trailers"`)
	}
	return nil
}

func headerListTooLong(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	_, _ = io.WriteString(w, "<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>")
}

func (s *Server) getBuf(size int) *[]byte {
	if v := s.bufs.Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 0, size)
	return &b
}

func (s *Server) putBuf(b *[]byte) {
	*b = (*b)[:0]
	s.bufs.Put(b)
}
