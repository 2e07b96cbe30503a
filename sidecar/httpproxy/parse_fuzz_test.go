package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
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
