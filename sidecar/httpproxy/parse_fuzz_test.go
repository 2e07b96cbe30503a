package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// FuzzReadRequest feeds raw bytes to the HTTP/1.1 request parser and body framing:
// no panics, limits hold, and a parsed request re-serialises to something that parses
// to the same method, target and framing.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /x?y=1 HTTP/1.1\r\nHost: svc:80\r\nContent-Length: 3\r\n\r\nabc",
		"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 4096)
		var m msg
		if err := m.readHead(br, 8192, 64); err != nil {
			return
		}
		if len(m.fields) > 64 {
			t.Fatalf("%d fields past the limit", len(m.fields))
		}
		if err := m.parseRequestLine(DefaultMaxURIBytes); err != nil {
			return
		}
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		m.writeRequestHead(w)
		w.WriteString("\r\n")
		switch {
		case m.chunked:
			_ = copyChunked(w, br)
		case m.contentLength > 0:
			_ = copyN(w, br, m.contentLength)
		}
		w.Flush()
		var m2 msg
		br2 := bufio.NewReaderSize(bytes.NewReader(out.Bytes()), 4096)
		if err := m2.readHead(br2, 1<<20, 1024); err != nil {
			t.Fatalf("re-serialised request does not parse: %v\n%q", err, out.Bytes())
		}
		if err := m2.parseRequestLine(DefaultMaxURIBytes); err != nil {
			t.Fatalf("re-serialised request line: %v\n%q", err, out.Bytes())
		}
		if string(m2.buf[m2.m0:m2.m1]) != string(m.buf[m.m0:m.m1]) || m2.path() != m.path() || m2.chunked != m.chunked || m2.contentLength != m.contentLength {
			t.Fatalf("round trip changed the request:\n%q\n%q", b, out.Bytes())
		}
		_, _ = io.Copy(io.Discard, br2)
	})
}

// FuzzReadResponse feeds raw bytes as an upstream response: the status line and
// framing parser and the body copiers must not panic, and a parsed status is 100..999.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 4096)
		var m msg
		if err := m.readHead(br, 8192, 64); err != nil {
			return
		}
		if err := m.parseStatusLine(); err != nil {
			return
		}
		if m.status < 100 || m.status > 999 {
			t.Fatalf("status %d", m.status)
		}
		w := bufio.NewWriter(io.Discard)
		switch {
		case m.chunked:
			_ = copyChunked(w, br)
		case m.contentLength > 0:
			_ = copyN(w, br, m.contentLength)
		default:
			_ = copyUntilEOF(w, br)
		}
	})
}

// FuzzPoolBody feeds raw bytes as a response body read off a pooled upstream
// connection (chunked, or length-delimited): no panics, never more bytes than
// arrived, and the connection is released exactly once, kept only after a clean end.
func FuzzPoolBody(f *testing.F) {
	for _, s := range []string{
		"3;ext\r\nabc\r\n0\r\nX-Sum: 3\r\n\r\n",
		"0\r\n\r\n",
		"a\r\n0123456789\r\n1\r\nx\r\n0\r\n\r\n",
		"zz\r\n",
		"3\r\nabcXY",
	} {
		f.Add([]byte(s), true)
	}
	f.Add([]byte("0123456789"), false)
	f.Fuzz(func(t *testing.T, b []byte, chunked bool) {
		releases, kept := 0, false
		body := &poolBody{r: bufio.NewReaderSize(bytes.NewReader(b), 4096), resp: &http.Response{}, chunked: chunked, keep: true,
			release: func(keep bool) { releases++; kept = keep }}
		if !chunked {
			body.left = int64(len(b) / 2)
		}
		out, err := io.ReadAll(body)
		if len(out) > len(b) {
			t.Fatalf("read %d bytes from %d", len(out), len(b))
		}
		body.Close()
		if releases != 1 {
			t.Fatalf("released %d times", releases)
		}
		if kept && err != nil {
			t.Fatalf("connection kept after %v", err)
		}
		if !chunked && err == nil && len(out) != len(b)/2 {
			t.Fatalf("length-delimited body: %d bytes, want %d", len(out), len(b)/2)
		}
	})
}

// FuzzRequestDifferential feeds the same bytes to our request parser (readHead,
// parseRequestLine, the chunked decoder) and to net/http's http.ReadRequest, one
// pipelined message after another, and fails when they disagree on a message both
// accept (bytes consumed, method, target, authority, header set after
// canonicalisation, body), or when ours accepts a message net/http rejects.
// Rejecting what net/http accepts is allowed; comparing stops at the first message
// either side rejects, and after a message that closes the connection on our side.
//
// Where we are stricter than net/http (we reject, it accepts), on purpose:
//   - a line ended by a bare LF (head, chunk lines, trailers), and a bare CR at a
//     line's end: an upstream splitting lines otherwise could be smuggled to;
//   - obsolete line folding (net/http joins the lines);
//   - an HTTP/1.1 request without Host, or with a Host of bytes outside RFC 3986's
//     authority (net/http's server checks these, ReadRequest does not);
//   - Transfer-Encoding on an HTTP/1.0 request (net/http ignores it and frames by
//     Content-Length), and an invalid Content-Length beside Transfer-Encoding;
//   - protocols other than HTTP/1.0 and HTTP/1.1; absolute-form targets with a
//     scheme other than http(s), userinfo, "%" in the host, or a query but no path;
//   - chunk-size lines with whitespace not followed by an extension, extensions
//     that are not ;token[=token|quoted-string], sizes of more than 15 hex digits,
//     trailer lines that are not well-formed header lines, trailer sections over
//     MaxTrailerBytes.
//
// Where we accept what net/http rejects, or differ on an accepted message, each
// handled below where it shows:
//   - Leading empty lines (CRLF) before a request line are skipped by us (RFC 9112
//     §2.2 SHOULD) and are a malformed request line to ReadRequest (net/http's
//     server skips them itself): they are stripped before net/http reads.
//   - net/http adds "Cache-Control: no-cache" to a request with "Pragma: no-cache"
//     and no Cache-Control (fixPragmaCacheControl); we forward what arrived.
//   - We close the connection after a message with both Content-Length and
//     Transfer-Encoding (RFC 9112 §6.1); net/http keeps reading.
//   - net/http bounds chunk-extension overhead ("too much non-data", 16 KiB
//     beyond the data); we bound each chunk line to maxChunkLine and stream, so a
//     body net/http refuses for that reason alone is not compared.
//   - Where the header section exceeds our bounds (MaxHeaderBytes,
//     MaxHeaderFields, MaxURIBytes, the read buffer) we answer 431/414; net/http's
//     ReadRequest has no bound of its own (its server adds one).
func FuzzRequestDifferential(f *testing.F) {
	for _, s := range differentialSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		oursSrc, stdSrc := bytes.NewReader(b), bytes.NewReader(b)
		ours, std := bufio.NewReaderSize(oursSrc, 4096), bufio.NewReaderSize(stdSrc, 4096)
		var m msg
		for n := 0; n < 16; n++ {
			oErr := m.readHead(ours, 8192, 64)
			if oErr == nil {
				oErr = m.parseRequestLine(1024)
			}
			var oBody bytes.Buffer
			if oErr == nil {
				w := bufio.NewWriter(&oBody)
				switch {
				case m.chunked:
					oErr = dechunkBody(w, ours)
				case m.contentLength > 0:
					oErr = copyN(w, ours, m.contentLength)
				}
				w.Flush()
			}
			// net/http, on the same bytes (leading CRLFs skipped: listed above).
			for {
				p, err := std.Peek(2)
				if err != nil || string(p) != "\r\n" {
					break
				}
				std.Discard(2)
			}
			req, sErr := http.ReadRequest(std)
			var sBody []byte
			if sErr == nil {
				sBody, sErr = io.ReadAll(req.Body)
			}
			if oErr != nil {
				return // we rejected (or the input ended): stricter is allowed
			}
			if sErr != nil {
				if strings.Contains(sErr.Error(), "too much non-data") {
					return // listed: net/http's chunk-overhead bound
				}
				t.Fatalf("message %d: we accepted what net/http rejects (%v):\n%q", n, sErr, b)
			}
			if got, want := len(b)-oursSrc.Len()-ours.Buffered(), len(b)-stdSrc.Len()-std.Buffered(); got != want {
				t.Fatalf("message %d: boundaries differ: we consumed %d bytes, net/http %d:\n%q", n, got, want, b)
			}
			if method := m.str(m.m0, m.m1); method != req.Method {
				t.Fatalf("message %d: method %q, net/http %q:\n%q", n, method, req.Method, b)
			}
			if target := m.str(m.t0, m.t1); target != req.RequestURI {
				t.Fatalf("message %d: target %q, net/http %q:\n%q", n, target, req.RequestURI, b)
			}
			if host, _ := m.authority(); host != req.Host {
				t.Fatalf("message %d: authority %q, net/http %q:\n%q", n, host, req.Host, b)
			}
			if o, s := ourHeader(&m), stdHeader(&m, req); !maps.EqualFunc(o, s, slices.Equal) {
				t.Fatalf("message %d: headers differ:\nours     %q\nnet/http %q\n%q", n, o, s, b)
			}
			if !bytes.Equal(oBody.Bytes(), sBody) {
				t.Fatalf("message %d: body %q, net/http %q:\n%q", n, oBody.Bytes(), sBody, b)
			}
			if req.Close && !m.close {
				t.Fatalf("message %d: net/http closes the connection after it, we do not:\n%q", n, b)
			}
			if m.close {
				return // nothing after it is read from this connection
			}
		}
	})
}

// ourHeader is m's header set as net/http would present it: canonical names,
// without the fields net/http moves out of Header (Host, and the framing fields
// it consumed).
func ourHeader(m *msg) http.Header {
	h := http.Header{}
	for i := range m.fields {
		k := http.CanonicalHeaderKey(string(m.name(i)))
		switch {
		case k == "Host", k == "Transfer-Encoding":
			continue
		case m.chunked && (k == "Content-Length" || k == "Trailer"):
			continue
		}
		h[k] = append(h[k], string(m.value(i)))
	}
	return h
}

// stdHeader is req.Header without what net/http added itself (listed above).
func stdHeader(m *msg, req *http.Request) http.Header {
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if _, ours := m.get("cache-control"); !ours && len(h["Cache-Control"]) == 1 && h["Cache-Control"][0] == "no-cache" {
		delete(h, "Cache-Control")
	}
	return h
}

// differentialSeeds: ordinary requests, pipelines, and the attack cases the
// request parser must refuse (findings 3-7 of issue #7).
var differentialSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /x?y=1 HTTP/1.1\r\nHost: svc:80\r\nContent-Length: 3\r\n\r\nabcGET /n HTTP/1.1\r\nHost: a\r\n\r\n",
	"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext\r\nabc\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b;c=\"q\\\"x\"\r\nhello\r\n0\r\n\r\n",
	"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
	"GET http://svc:80/p?q HTTP/1.1\r\nHost: other\r\n\r\n",
	"GET http://svc HTTP/1.1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT svc:443 HTTP/1.1\r\nHost: svc:443\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\nConnection: x-a, close\r\nX-A: 1\r\n\r\n",
	// attacks
	"GET / HTTP/1.1\nHost: a\r\n\r\n",
	"GET /\rx HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
	"G\x00T / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX\r: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\rX\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a\x00=b\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a b\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nNoColon\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\nY: b\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n",
	"GET http://u@svc/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://svc:x/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
}
