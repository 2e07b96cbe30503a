package h2client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/sidecar/h2flow"
)

// stream is one request and its response. Fields after the first group are
// guarded by Conn.mu.
type stream struct {
	c      *Conn
	id     uint32
	ctx    context.Context
	isHead bool
	notify chan struct{} // capacity 1: the caller waiting on this stream looks again

	resp        *http.Response // the final response's head, once read
	buf         []byte         // response body bytes received; buf[off:] not yet read
	off         int
	pooled      *[]byte // buf's first backing array, from respBufs: back there at Close
	readErr     error   // io.EOF after END_STREAM; the body's error once all of buf is read
	trailers    map[string][]string
	readDone    bool // END_STREAM (or a reset) from the server
	sentEnd     bool // this client's END_STREAM went out
	stopBody    bool // the request body is not to be sent on (stream done, or a >299 answer)
	bodyClosed  bool // the response body was closed
	aborted     bool
	err         error     // why it was aborted
	reqBody     io.Closer // the request body being written, closed to stop its writer
	bodyStopped bool      // reqBody was closed by stopBodyLocked
	bytesRemain int64     // of the response's declared content-length, -1 unknown
	headerBytes int64     // 1xx header bytes so far
	sendWin     int64
	inflow      h2flow.Inflow
}

// wakeLocked lets the caller waiting on st look again.
func (st *stream) wakeLocked() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// abortLocked ends st with err: its waiter, body reader and body writer see it.
func (st *stream) abortLocked(err error) {
	if st.aborted {
		return
	}
	st.aborted, st.err = true, err
	st.stopBodyLocked()
	if !st.readDone {
		st.readDone = true
		st.readErr = err
	}
	st.wakeLocked()
	st.c.cond.Broadcast()
}

// stopBodyLocked stops the request body's writer: its blocked Read is
// interrupted by closing the body (net/http does the same).
func (st *stream) stopBodyLocked() {
	st.stopBody = true
	st.c.cond.Broadcast()
	if st.reqBody != nil && !st.bodyStopped {
		st.bodyStopped = true
		go st.reqBody.Close()
	}
}

// wait blocks until st's waiter is woken or ctx ends (then st is reset).
func (st *stream) wait() {
	select {
	case <-st.notify:
	case <-st.ctx.Done():
		st.cancel(st.ctx.Err())
	}
}

// cancel resets st (CANCEL) and ends it with err, if it is still open.
func (st *stream) cancel(err error) {
	c := st.c
	c.mu.Lock()
	if c.streams[st.id] != st {
		st.abortLocked(err)
		c.mu.Unlock()
		return
	}
	st.abortLocked(err)
	c.removeLocked(st)
	c.mu.Unlock()
	c.writeControl(true, func(fr *http2.Framer) error { return fr.WriteRSTStream(st.id, http2.ErrCodeCancel) })
	c.afterRemove()
}

// actualContentLength is the request body's length: 0 none, -1 unknown.
func actualContentLength(req *http.Request) int64 {
	if req.Body == nil || req.Body == http.NoBody {
		return 0
	}
	if req.ContentLength != 0 {
		return req.ContentLength
	}
	return -1
}

// RoundTrip sends req on a new stream and returns the response's head; the
// body streams from the connection. It takes a slot reserved with Reserve,
// else waits for one. req.Body is closed, error or not.
func (c *Conn) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody := func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}
	ctx := req.Context()
	c.mu.Lock()
	if c.reserved == 0 {
		// Without a reservation, wait for a slot and hold it as one.
		if err := c.awaitSlotLocked(ctx); err != nil {
			c.mu.Unlock()
			closeBody()
			return nil, err
		}
	}
	c.mu.Unlock()
	// From here one reservation is this request's: writeHeaders turns it into
	// its stream, or it is released.
	cl := actualContentLength(req)
	hdr, err := checkRequest(req, cl)
	st := &stream{c: c, ctx: ctx, isHead: req.Method == http.MethodHead, notify: make(chan struct{}, 1), bytesRemain: -1}
	hasBody := cl != 0
	if hasBody {
		st.reqBody = req.Body // before the stream is published: a >299 answer closes it
	}
	if err == nil {
		err = c.writeHeaders(st, req, &hdr, !hasBody && hdr.trailers == "")
	}
	if err != nil {
		c.Release()
		closeBody()
		return nil, err
	}
	switch {
	case hasBody:
		go st.writeBody(req.Body, req.Trailer, cl)
	case hdr.trailers != "":
		closeBody()
		st.sendTrailers(req.Trailer)
	default:
		closeBody()
	}
	for {
		c.mu.Lock()
		if st.resp != nil {
			resp := st.resp
			c.mu.Unlock()
			resp.Request = req
			return resp, nil
		}
		if st.aborted {
			err := st.err
			c.mu.Unlock()
			return nil, err
		}
		c.mu.Unlock()
		st.wait()
	}
}

// awaitSlotLocked waits until a stream may open (net/http's RoundTrip
// without a reservation waits too) and reserves it, or fails when none ever
// will.
func (c *Conn) awaitSlotLocked(ctx context.Context) error {
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if c.closed || c.goAway {
			return ErrUnusable
		}
		if len(c.streams)+c.reserved < c.maxStreams {
			c.reserved++
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if stop == nil && ctx.Done() != nil {
			stop = context.AfterFunc(ctx, func() {
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			})
		}
		c.cond.Wait()
	}
}

// reqHeader is a request's head checked and ready to encode.
type reqHeader struct {
	authority, method, path, scheme string
	trailers                        string // the trailer field's value
	contentLength                   string // "" none
}

// checkRequest validates req as net/http's client does before anything is
// written (nothing is sent for a request it refuses).
func checkRequest(req *http.Request, cl int64) (reqHeader, error) {
	var h reqHeader
	if req.URL == nil {
		return h, errors.New("h2client: nil Request.URL")
	}
	if req.Header == nil {
		return h, errors.New("h2client: nil Request.Header")
	}
	if req.URL.Host == "" {
		return h, errors.New("h2client: no Host in request URL")
	}
	if vv := req.Header["Upgrade"]; len(vv) > 0 && vv[0] != "" && vv[0] != "chunked" {
		return h, fmt.Errorf("h2client: invalid Upgrade request header: %q", vv)
	}
	if vv := req.Header["Transfer-Encoding"]; len(vv) > 0 && (len(vv) > 1 || vv[0] != "" && vv[0] != "chunked") {
		return h, fmt.Errorf("h2client: invalid Transfer-Encoding request header: %q", vv)
	}
	if vv := req.Header["Connection"]; len(vv) > 0 && (len(vv) > 1 || vv[0] != "" && !strings.EqualFold(vv[0], "close") && !strings.EqualFold(vv[0], "keep-alive")) {
		return h, fmt.Errorf("h2client: invalid Connection request header: %q", vv)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(host)
	if err != nil {
		return h, fmt.Errorf("h2client: request host: %w", err)
	}
	if !httpguts.ValidHostHeader(host) {
		return h, errors.New("h2client: invalid Host header")
	}
	h.authority = host
	h.method = req.Method
	if h.method == "" {
		h.method = http.MethodGet
	}
	if !validMethod(h.method) {
		return h, fmt.Errorf("h2client: invalid method %q", h.method)
	}
	if h.method == http.MethodConnect || req.Header[":protocol"] != nil {
		return h, errors.New("h2client: CONNECT is not supported")
	}
	h.path = req.URL.RequestURI()
	if !validPseudoPath(h.path) {
		orig := h.path
		h.path = strings.TrimPrefix(h.path, req.URL.Scheme+"://"+host)
		if !validPseudoPath(h.path) {
			return h, fmt.Errorf("h2client: invalid request :path %q", orig)
		}
	}
	h.scheme = req.URL.Scheme
	if err := validateHeaders(req.Header); err != "" {
		return h, fmt.Errorf("h2client: invalid HTTP header %s", err)
	}
	if err := validateHeaders(req.Trailer); err != "" {
		return h, fmt.Errorf("h2client: invalid HTTP trailer %s", err)
	}
	if len(req.Trailer) > 0 {
		keys := make([]string, 0, len(req.Trailer))
		for k := range req.Trailer {
			k = textproto.CanonicalMIMEHeaderKey(k)
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return h, fmt.Errorf("h2client: invalid Trailer key %q", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h.trailers = strings.Join(keys, ",")
	}
	if cl > 0 || cl == 0 && (h.method == http.MethodPost || h.method == http.MethodPut || h.method == http.MethodPatch) {
		h.contentLength = strconv.FormatInt(cl, 10)
	}
	return h, nil
}

func validPseudoPath(v string) bool { return len(v) > 0 && v[0] == '/' || v == "*" }

func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return m != ""
}

// validateHeaders names the first invalid field of hdrs, "" when none.
func validateHeaders(hdrs http.Header) string {
	for k, vv := range hdrs {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Sprintf("name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Sprintf("value for header %q", k)
			}
		}
	}
	return ""
}

// eachField calls f with each field of the request's head in the order it
// is sent (net/http's rules: hop-by-hop fields dropped, cookies split, TE only
// as trailers is not checked here: the proxy strips it first).
func eachField(req *http.Request, h *reqHeader, f func(name, value string)) {
	f(":authority", h.authority)
	f(":method", h.method)
	f(":path", h.path)
	f(":scheme", h.scheme)
	if h.trailers != "" {
		f("trailer", h.trailers)
	}
	for k, vv := range req.Header {
		switch {
		case asciiEqualFold(k, "host"), asciiEqualFold(k, "content-length"),
			asciiEqualFold(k, "connection"), asciiEqualFold(k, "proxy-connection"),
			asciiEqualFold(k, "transfer-encoding"), asciiEqualFold(k, "upgrade"), asciiEqualFold(k, "keep-alive"):
			continue
		case asciiEqualFold(k, "user-agent"):
			if len(vv) == 0 || vv[0] == "" {
				continue
			}
			vv = vv[:1]
		case asciiEqualFold(k, "cookie"):
			// Split at "; " for better compression (RFC 9113 §8.2.3).
			for _, v := range vv {
				for {
					i := strings.IndexByte(v, ';')
					if i < 0 {
						break
					}
					f("cookie", v[:i])
					i++
					for i < len(v) && v[i] == ' ' {
						i++
					}
					v = v[i:]
				}
				if v != "" {
					f("cookie", v)
				}
			}
			continue
		}
		for _, v := range vv {
			f(k, v)
		}
	}
	if h.contentLength != "" {
		f("content-length", h.contentLength)
	}
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lowerByte(s[i]) != lowerByte(t[i]) {
			return false
		}
	}
	return true
}

func lowerByte(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// writeHeaders opens st on the caller's reservation (its id assigned under
// wmu, so ids go out in order) and writes its HEADERS, flushed. On an error
// the reservation is still the caller's.
func (c *Conn) writeHeaders(st *stream, req *http.Request, h *reqHeader, endStream bool) error {
	c.wmu.Lock()
	c.mu.Lock()
	if c.closed || c.goAway || c.wErr != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return ErrUnusable
	}
	peerMax, maxFrame := c.peerMaxHeader, c.peerMaxFrame
	c.mu.Unlock()
	if peerMax < 1<<32 {
		var size uint64
		eachField(req, h, func(name, value string) { size += uint64(len(name) + len(value) + 32) })
		if size > peerMax {
			c.wmu.Unlock()
			return errPeerHeaderList
		}
	}
	c.mu.Lock()
	st.id = c.nextID
	c.nextID += 2
	c.reserved--
	st.sendWin = c.initSendWin
	st.inflow.Init(int32(c.cfg.StreamWindow))
	st.sentEnd = endStream
	c.streams[st.id] = st
	c.opened++
	c.mu.Unlock()
	c.hbuf.Reset()
	eachField(req, h, func(name, value string) {
		name, ok := c.lowerKey(name)
		if !ok {
			return // not ASCII: never valid in HTTP/2 (net/http skips it too)
		}
		_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
	})
	c.writeBlockLocked(st.id, endStream, maxFrame)
	if c.wErr == nil {
		c.wErr = c.bw.Flush()
	}
	c.pending = false
	werr := c.wErr
	c.wmu.Unlock()
	if werr != nil {
		c.mu.Lock()
		c.reserved++ // the caller releases it
		st.abortLocked(werr)
		c.removeLocked(st)
		c.mu.Unlock()
		c.closeWith(fmt.Errorf("h2client: write: %w", werr))
		return fmt.Errorf("%w: %w", ErrUnusable, werr)
	}
	return nil
}

// writeBlockLocked writes hbuf as HEADERS and CONTINUATION frames of at most
// maxFrame bytes each.
func (c *Conn) writeBlockLocked(id uint32, end bool, maxFrame int) {
	block := c.hbuf.Bytes()
	first := true
	for len(block) > 0 || first {
		chunk := block[:min(len(block), maxFrame)]
		block = block[len(chunk):]
		var err error
		if first {
			err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			err = c.fr.WriteContinuation(id, len(block) == 0, chunk)
		}
		if err != nil && c.wErr == nil {
			c.wErr = err
		}
	}
}

// lowerKey lower-cases a field name, with a small cache; false when it is not
// printable ASCII.
func (c *Conn) lowerKey(k string) (string, bool) {
	if len(k) > 0 && k[0] == ':' {
		return k, true
	}
	if v, ok := c.lower[k]; ok {
		return v, true
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > '~' {
			return "", false
		}
	}
	v := strings.ToLower(k)
	if c.lower == nil {
		c.lower = make(map[string]string)
	}
	if len(c.lower) < maxLowerCache {
		c.lower[k] = v
	}
	return v, true
}

// canonical is the canonical form of a lower-case field name, with a small
// reader-owned cache.
func (c *Conn) canonical(name string) string {
	if v, ok := c.canon[name]; ok {
		return v
	}
	v := textproto.CanonicalMIMEHeaderKey(name)
	if c.canon == nil {
		c.canon = make(map[string]string)
	}
	if len(c.canon) < maxLowerCache {
		c.canon[name] = v
	}
	return v
}

// respBufSize is the capacity of the pooled response buffers: a response
// whose first DATA fits starts in one (more grows it past the pool).
const respBufSize = 4 << 10

var respBufs = sync.Pool{New: func() any { b := make([]byte, 0, respBufSize); return &b }}

var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// writeBody sends the request body (and trailers) on st, within flow control,
// until it ends, fails, or the stream no longer takes it.
func (st *stream) writeBody(body io.ReadCloser, trailer http.Header, cl int64) {
	defer func() {
		st.c.mu.Lock()
		closeIt := !st.bodyStopped
		st.bodyStopped = true
		st.c.mu.Unlock()
		if closeIt {
			body.Close()
		}
	}()
	bp := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(bp)
	buf := *bp
	var sent int64
	hasTrailers := len(trailer) > 0
	for {
		n, err := body.Read(buf)
		if err != nil && err != io.EOF {
			st.cancel(fmt.Errorf("h2client: read request body: %w", err))
			return
		}
		eof := err == io.EOF
		sent += int64(n)
		if cl >= 0 && sent > cl {
			st.cancel(errReqBodyTooLong)
			return
		}
		if !eof && cl >= 0 && sent == cl {
			// All it announced: make sure it ends here, so END_STREAM goes
			// with the last DATA.
			var one [1]byte
			m, err := body.Read(one[:])
			switch {
			case m > 0:
				st.cancel(errReqBodyTooLong)
				return
			case err == io.EOF:
				eof = true
			case err != nil:
				st.cancel(fmt.Errorf("h2client: read request body: %w", err))
				return
			}
		}
		if eof && cl > 0 && sent < cl {
			st.cancel(errReqBodyTooShort)
			return
		}
		if !st.sendData(buf[:n], eof && !hasTrailers) {
			return
		}
		if eof {
			break
		}
	}
	if hasTrailers {
		st.sendTrailers(trailer)
	}
}

// sendData writes p as DATA frames as the windows allow, the last with
// END_STREAM when end; false when the stream takes no more.
func (st *stream) sendData(p []byte, end bool) bool {
	c := st.c
	for len(p) > 0 || end {
		c.mu.Lock()
		for !st.stopBody && !c.closed && len(p) > 0 && (st.sendWin <= 0 || c.sendWin <= 0) {
			c.cond.Wait()
		}
		stop := st.stopBody || c.closed
		c.mu.Unlock()
		if stop {
			return false
		}
		// The window is taken and the stream checked again under wmu: a
		// RST_STREAM written meanwhile (the response ended, a cancel) is
		// never followed by this stream's DATA.
		c.wmu.Lock()
		c.mu.Lock()
		if st.stopBody || c.closed {
			c.mu.Unlock()
			c.wmu.Unlock()
			return false
		}
		n := min(int64(len(p)), st.sendWin, c.sendWin, int64(c.peerMaxFrame))
		if n <= 0 && len(p) > 0 {
			c.mu.Unlock()
			c.wmu.Unlock()
			continue // the window shrank (SETTINGS) since the wait
		}
		st.sendWin -= n
		c.sendWin -= n
		last := end && int(n) == len(p)
		if last {
			st.sentEnd = true
		}
		c.mu.Unlock()
		if c.wErr == nil {
			c.wErr = c.fr.WriteData(st.id, last, p[:n])
		}
		if c.wErr == nil {
			c.wErr = c.bw.Flush()
		}
		c.pending = false
		werr := c.wErr
		c.wmu.Unlock()
		if werr != nil {
			st.cancel(werr)
			return false
		}
		p = p[n:]
		if last {
			st.sentEndDone()
			return true
		}
	}
	return true
}

// sentEndDone removes st when its response has ended too.
func (st *stream) sentEndDone() {
	c := st.c
	c.mu.Lock()
	done := st.readDone && c.streams[st.id] == st
	if done {
		c.removeLocked(st)
	}
	c.mu.Unlock()
	if done {
		c.afterRemove()
	}
}

// sendTrailers writes the request trailers with END_STREAM.
func (st *stream) sendTrailers(trailer http.Header) {
	c := st.c
	c.wmu.Lock()
	c.mu.Lock()
	if st.stopBody || c.closed {
		c.mu.Unlock()
		c.wmu.Unlock()
		return
	}
	st.sentEnd = true
	maxFrame := c.peerMaxFrame
	c.mu.Unlock()
	c.hbuf.Reset()
	for k, vv := range trailer {
		name, ok := c.lowerKey(k)
		if !ok {
			continue
		}
		for _, v := range vv {
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	c.writeBlockLocked(st.id, true, maxFrame)
	if c.wErr == nil {
		c.wErr = c.bw.Flush()
	}
	c.pending = false
	werr := c.wErr
	c.wmu.Unlock()
	if werr != nil {
		st.cancel(werr)
		return
	}
	st.sentEndDone()
}

// processHeaders takes a response's head (or 1xx, or trailers).
func (c *Conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	st := c.streams[id]
	if st == nil {
		c.mu.Unlock()
		return nil // a stream this client reset, or none of its own: ignored (as net/http)
	}
	if st.readDone {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errors.New("h2client: HEADERS after END_STREAM")}
	}
	if st.resp != nil {
		c.mu.Unlock()
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol) // trailers end the stream and carry no pseudo-field
		}
		tr := make(map[string][]string, len(f.RegularFields()))
		for _, hf := range f.RegularFields() {
			k := c.canonical(hf.Name)
			tr[k] = append(tr[k], hf.Value)
		}
		c.mu.Lock()
		reset, removed := c.endRemoteLocked(st, tr)
		c.mu.Unlock()
		c.afterEnd(st, reset, removed)
		return nil
	}
	c.mu.Unlock()
	resp, err := c.newResponse(st, f)
	if err != nil {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	if resp == nil {
		return nil // 1xx
	}
	c.mu.Lock()
	if c.streams[id] != st {
		c.mu.Unlock()
		return nil
	}
	st.resp = resp
	st.bytesRemain = resp.ContentLength
	if resp.StatusCode > 299 && !st.sentEnd {
		// The server does not want the rest of the body (net/http's heuristic:
		// 1xx and 2xx may be full duplex, so their body goes on).
		st.stopBodyLocked()
	}
	st.wakeLocked()
	var reset, removed bool
	if f.StreamEnded() {
		reset, removed = c.endRemoteLocked(st, nil)
	}
	c.mu.Unlock()
	c.afterEnd(st, reset, removed)
	return nil
}

// newResponse builds the response of a HEADERS frame; nil for a 1xx.
func (c *Conn) newResponse(st *stream, f *http2.MetaHeadersFrame) (*http.Response, error) {
	if f.Truncated {
		return nil, errHeaderListSize
	}
	status := f.PseudoValue("status")
	if status == "" {
		return nil, errors.New("h2client: malformed response: missing :status")
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, errors.New("h2client: malformed response: non-numeric :status")
	}
	if code >= 100 && code <= 199 {
		if f.StreamEnded() {
			return nil, errors.New("h2client: 1xx response with END_STREAM")
		}
		for _, hf := range f.Fields {
			st.headerBytes += int64(hf.Size())
		}
		if st.headerBytes > int64(c.cfg.MaxHeaderListSize) {
			return nil, errors.New("h2client: 1xx responses' header lists larger than MaxHeaderListSize")
		}
		return nil, nil
	}
	regular := f.RegularFields()
	strs := make([]string, len(regular))
	header := make(http.Header, len(regular))
	resp := &http.Response{Proto: "HTTP/2.0", ProtoMajor: 2, Header: header, StatusCode: code, Status: statusLine(status, code)}
	for _, hf := range regular {
		k := c.canonical(hf.Name)
		if k == "Trailer" {
			if resp.Trailer == nil {
				resp.Trailer = make(http.Header)
			}
			for v := range strings.SplitSeq(hf.Value, ",") {
				if v = textproto.TrimString(v); v != "" {
					resp.Trailer[textproto.CanonicalMIMEHeaderKey(v)] = nil
				}
			}
			continue
		}
		vv := header[k]
		if vv == nil && len(strs) > 0 {
			vv, strs = strs[:1:1], strs[1:]
			vv[0] = hf.Value
			header[k] = vv
		} else {
			header[k] = append(vv, hf.Value)
		}
	}
	resp.ContentLength = -1
	if cls := header["Content-Length"]; len(cls) == 1 {
		if n, err := strconv.ParseUint(cls[0], 10, 63); err == nil {
			resp.ContentLength = int64(n)
		}
	} else if len(cls) == 0 && f.StreamEnded() && !st.isHead {
		resp.ContentLength = 0
	}
	switch {
	case st.isHead:
		resp.Body = http.NoBody
	case f.StreamEnded():
		if resp.ContentLength > 0 {
			resp.Body = missingBody{}
		} else {
			resp.Body = http.NoBody
		}
	default:
		resp.Body = (*responseBody)(st)
	}
	return resp, nil
}

// statusLine is Response.Status, without an allocation for common codes.
func statusLine(status string, code int) string {
	switch code {
	case 200:
		return "200 OK"
	case 204:
		return "204 No Content"
	case 404:
		return "404 Not Found"
	case 503:
		return "503 Service Unavailable"
	}
	return status + " " + http.StatusText(code)
}

// missingBody is the body of a response that ended at its HEADERS while
// declaring a length.
type missingBody struct{}

func (missingBody) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (missingBody) Close() error             { return nil }

// responseBody is a stream seen as its response's body.
type responseBody stream

func (b *responseBody) Read(p []byte) (int, error) {
	st := (*stream)(b)
	c := st.c
	for {
		c.mu.Lock()
		if st.off < len(st.buf) {
			n := copy(p, st.buf[st.off:])
			st.off += n
			if st.off == len(st.buf) {
				st.buf, st.off = st.buf[:0], 0 // reused by the next DATA
			}
			var err error
			if st.bytesRemain >= 0 {
				if int64(n) > st.bytesRemain {
					n = int(st.bytesRemain)
					err = errTooLong
				} else {
					st.bytesRemain -= int64(n)
				}
			}
			connUpd := c.inflow.Add(n)
			var streamUpd int32
			if !st.readDone {
				streamUpd = st.inflow.Add(n)
			}
			c.mu.Unlock()
			if connUpd > 0 || streamUpd > 0 {
				c.sendWindowUpdates(st.id, streamUpd, connUpd, true)
			}
			if err != nil {
				st.cancel(err)
			}
			return n, err
		}
		if st.readErr != nil {
			err := st.readErr
			if err == io.EOF && st.bytesRemain > 0 {
				err = io.ErrUnexpectedEOF
			}
			tr := st.trailers
			st.trailers = nil
			c.mu.Unlock()
			if tr != nil && st.resp != nil {
				if st.resp.Trailer == nil {
					st.resp.Trailer = make(http.Header, len(tr))
				}
				for k, vv := range tr {
					st.resp.Trailer[k] = vv
				}
			}
			return 0, err
		}
		c.mu.Unlock()
		st.wait()
	}
}

func (b *responseBody) Close() error {
	st := (*stream)(b)
	c := st.c
	c.mu.Lock()
	if st.bodyClosed {
		c.mu.Unlock()
		return nil
	}
	st.bodyClosed = true
	unread := len(st.buf) - st.off
	st.buf, st.off = nil, 0
	if st.pooled != nil {
		// Nothing reads buf after Close, and the reader no longer finds the
		// stream (removed, or its body closed) to append to it.
		respBufs.Put(st.pooled)
		st.pooled = nil
	}
	connUpd := int32(0)
	if unread > 0 {
		connUpd = c.inflow.Add(unread)
	}
	open := c.streams[st.id] == st
	if open {
		st.abortLocked(errBodyClosed)
		c.removeLocked(st)
	} else if !st.aborted {
		st.readErr = errBodyClosed
	}
	c.mu.Unlock()
	if open || connUpd > 0 {
		c.writeControl(true, func(fr *http2.Framer) error {
			if connUpd > 0 {
				if err := fr.WriteWindowUpdate(0, uint32(connUpd)); err != nil {
					return err
				}
			}
			if open {
				return fr.WriteRSTStream(st.id, http2.ErrCodeCancel)
			}
			return nil
		})
	}
	if open {
		c.afterRemove()
	}
	return nil
}
