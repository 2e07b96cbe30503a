package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
)

// roundTripPool sends out (a request that came over HTTP/2, typically from a peer
// sidecar) to a plain HTTP/1.1 endpoint on the sidecar's own keep-alive pool and
// reads the response head in the calling goroutine. net/http's transport hands
// each request to a writeLoop goroutine and each response to a readLoop one: that
// handoff was about a third of an inbound sidecar's CPU (pprof). The caller sends
// requests whose body length is unknown through that transport instead.
func (p *Proxy) roundTripPool(ctx context.Context, out *http.Request, c *cluster.Cluster, e *cluster.Endpoint) (*http.Response, error) {
	bodyless := out.Body == nil || out.Body == http.NoBody
	for stale := 0; ; stale++ {
		uc, reused, err := p.cfg.Pool.Get(ctx, c, e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		// The connection's deadline follows the request's; a cancellation cuts the
		// connection (it cannot be reused mid-message anyway).
		dl, _ := ctx.Deadline()
		_ = uc.SetDeadline(dl)
		stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
		resp, err := p.exchangePool(uc, out, stop)
		if err == nil {
			return resp, nil
		}
		stop()
		uc.Close()
		if errors.Is(err, errStaleConn) && reused && bodyless && stale == 0 && ctx.Err() == nil {
			continue // the peer closed an idle pooled connection: one fresh try
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
}

// errStaleConn: a reused connection failed before any response byte.
var errStaleConn = errors.New("pooled connection closed before a response")

var respMsgs = sync.Pool{New: func() any {
	m := &msg{buf: make([]byte, 0, 1024), fields: make([]field, 0, 16)}
	return m
}}

// exchangePool writes out on uc and reads the response head. On success the
// response body owns uc (and stop); on error the caller closes uc.
func (p *Proxy) exchangePool(uc *cluster.Conn, out *http.Request, stop func() bool) (*http.Response, error) {
	w := uc.W
	w.WriteString(out.Method)
	w.WriteByte(' ')
	w.WriteString(out.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(out.Host)
	w.WriteString("\r\n")
	for k, vs := range out.Header {
		switch k {
		case "Host", "Content-Length", "Expect", "Te", "Trailer":
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	n := out.ContentLength
	if out.Body == nil || out.Body == http.NoBody {
		n = 0
	}
	if n > 0 || out.Method == http.MethodPost || out.Method == http.MethodPut || out.Method == http.MethodPatch {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(n, 10))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	if n > 0 {
		if _, err := io.CopyN(w, out.Body, n); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("%w: %w", errStaleConn, err)
	}
	m := respMsgs.Get().(*msg)
	defer respMsgs.Put(m)
	for interim := 0; ; interim++ {
		if interim > MaxInterimResponses {
			return nil, fmt.Errorf("upstream sent more than %d interim (1xx) responses", MaxInterimResponses)
		}
		if err := m.readHead(uc.R, p.cfg.MaxHeaderBytes, p.cfg.MaxHeaderFields); err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
				return nil, fmt.Errorf("%w: %w", errStaleConn, err)
			}
			return nil, err
		}
		if err := m.parseStatusLine(); err != nil {
			return nil, err
		}
		if m.status == http.StatusSwitchingProtocols {
			return nil, errors.New("upstream switched protocols")
		}
		if m.status >= 200 {
			break
		}
	}
	resp := &http.Response{
		Status: strconv.Itoa(m.status) + " " + http.StatusText(m.status), StatusCode: m.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(m.fields)), ContentLength: m.contentLength, Request: out,
	}
	for i := range m.fields {
		name := m.name(i)
		if m.isHopByHop(i) {
			if len(name) == len("trailer") && equalFoldLower(name, "trailer") {
				for _, t := range strings.Split(string(m.value(i)), ",") {
					if t = strings.TrimSpace(t); t != "" {
						if resp.Trailer == nil {
							resp.Trailer = http.Header{}
						}
						resp.Trailer[http.CanonicalHeaderKey(t)] = nil
					}
				}
			}
			continue
		}
		k := http.CanonicalHeaderKey(string(name))
		resp.Header[k] = append(resp.Header[k], string(m.value(i)))
	}
	// A 204 announcing content cannot be trusted with the next request (the pool
	// itself refuses a connection with bytes buffered past the message).
	keep := !m.close && !(m.status == http.StatusNoContent && (m.chunked || m.contentLength > 0))
	body := &poolBody{r: uc.R, resp: resp, release: func(keep bool) {
		if stop() && keep {
			_ = uc.SetDeadline(time.Time{})
			p.cfg.Pool.Put(uc)
		} else {
			uc.Close()
		}
	}}
	switch {
	case out.Method == http.MethodHead || m.status == http.StatusNoContent || m.status == http.StatusNotModified:
		resp.ContentLength = 0
		if m.status != http.StatusNoContent && m.contentLength >= 0 {
			resp.Header.Set("Content-Length", strconv.FormatInt(m.contentLength, 10))
		}
		body.finish(keep)
		resp.Body = http.NoBody
		return resp, nil
	case m.chunked:
		resp.ContentLength = -1
		body.chunked, body.keep = true, keep
	case m.contentLength >= 0:
		resp.Header.Set("Content-Length", strconv.FormatInt(m.contentLength, 10))
		body.left, body.keep = m.contentLength, keep
	default: // until the upstream closes
		body.left = -1
	}
	if body.left == 0 && !body.chunked {
		body.finish(keep)
		resp.Body = http.NoBody
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

// poolBody reads a response body off a pooled connection and gives the connection
// back once the body ended cleanly; closed early, it closes the connection.
type poolBody struct {
	release func(keep bool) // gives the connection back (keep) or closes it; called once
	r       *bufio.Reader
	resp    *http.Response
	left    int64 // bytes left in a length-delimited body or chunk; -1 until EOF
	chunked bool
	inChunk bool
	keep    bool
	done    bool
	err     error
}

func (b *poolBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.chunked && !b.inChunk {
		if err := b.nextChunk(); err != nil {
			return 0, b.fail(err)
		}
		if b.done {
			return 0, io.EOF
		}
	}
	if b.left >= 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	switch {
	case b.left < 0 && err == io.EOF: // body delimited by close
		b.finish(false)
		return n, io.EOF
	case err != nil:
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, b.fail(err)
	case b.left == 0 && b.chunked:
		crlf, err := b.r.ReadSlice('\n')
		if err != nil || len(crlf) != 2 || crlf[0] != '\r' {
			return n, b.fail(fmt.Errorf("%w: chunk not terminated by CRLF", errMalformed))
		}
		b.inChunk = false
	case b.left == 0:
		b.finish(b.keep)
		return n, io.EOF
	}
	return n, nil
}

// nextChunk reads a chunk-size line; at the last chunk it reads the trailers.
func (b *poolBody) nextChunk() error {
	line, err := b.r.ReadSlice('\n')
	if err != nil {
		return chunkErr(err)
	}
	size, err := parseChunkLine(line)
	if err != nil {
		return err
	}
	if size > 0 {
		b.left, b.inChunk = size, true
		return nil
	}
	total := 0
	for {
		t, err := readTrailer(b.r, &total)
		if err != nil {
			return err
		}
		t = t[:len(t)-2]
		if len(t) == 0 {
			b.finish(b.keep)
			return nil
		}
		c := strings.IndexByte(string(t), ':')
		k := http.CanonicalHeaderKey(string(t[:c]))
		if b.resp.Trailer == nil {
			b.resp.Trailer = http.Header{}
		}
		b.resp.Trailer[k] = append(b.resp.Trailer[k], strings.TrimSpace(string(t[c+1:])))
	}
}

func (b *poolBody) fail(err error) error {
	b.err = err
	return err
}

// finish ends the body: the connection goes back to the pool when reusable.
func (b *poolBody) finish(keep bool) {
	if b.done {
		return
	}
	b.done = true
	b.release(keep)
}

// Close before the end closes the connection: the rest of the body is unread.
func (b *poolBody) Close() error {
	b.finish(false)
	return nil
}
