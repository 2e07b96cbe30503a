package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
)

// FuzzResponseDiff is the differential test of our HTTP/1.1 response parser
// (readHead, parseStatusLine, responseFraming, copyResponseBody: the code the
// proxy forwards responses with) against net/http's http.ReadResponse, over a
// sequence of responses on one connection. methods says which requests were HEAD
// (bit i for response i), since HEAD changes framing. It fails when both accept a
// message but disagree on where it ends, its status, its header set or its content,
// or when ours accepts a message net/http rejects.
//
// Deliberate differences, where ours is stricter (ours rejects, net/http accepts):
//   - lines must end in CRLF; bare LF, and control bytes (bare CR, NUL, ...) in the
//     status line, header lines, chunk lines and trailers are rejected (RFC 9112
//     §2.2; net/http accepts bare LF and some controls): a peer that splits lines
//     differently could smuggle through them.
//   - obsolete line folding is rejected (RFC 9112 §5.2 lets a proxy reject it).
//   - status codes below 100, a version other than HTTP/1.x, and a status line
//     whose code is not followed by SP or its end are rejected.
//   - Transfer-Encoding on an HTTP/1.0 response is faulty framing (RFC 9112 §6.1);
//     net/http ignores it and reads by Content-Length or close.
//   - Content-Length beyond 18 digits and chunk sizes beyond 15 hex digits are
//     rejected (no real body is that large; net/http takes up to 63 bits).
//   - a line longer than the connection's buffer (here 4 KiB) is rejected: the
//     header section and each line are bounded, net/http's ReadResponse is not.
//   - chunk extensions must be ;token[=token|quoted-string] (RFC 9112 §7.1.1).
//
// Where ours accepts more (each skipped below, with its reason):
//   - the Trailer header's value is not interpreted: net/http rejects a Trailer
//     that names Transfer-Encoding, Trailer or Content-Length; the proxy never
//     reads a trailer field for framing, so such a declaration changes nothing.
//   - several Content-Length fields with the same number written differently
//     ("000" and "0") are one length (RFC 9110 §8.6 allows either); net/http wants
//     the same text. The length, and so the message boundary, is the same, and the
//     proxy writes its own single Content-Length.
//
// Not compared: trailer fields (the proxy forwards them as received, net/http
// parses them into Response.Trailer), the reason phrase, and the protocol minor
// version beyond 1.0 versus 1.1 keep-alive semantics.
func FuzzResponseDiff(f *testing.F) {
	for _, s := range []struct {
		b       string
		methods uint8
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 204 No Content\r\n\r\n", 0},
		// finding 1: bodies where none may be, and more than Content-Length
		{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 0},
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 0},
		{"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", 0},
		// finding 2: interim responses
		{"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi", 0},
		// finding 5: chunked, trailers, close-delimited, HTTP/1.0
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 11\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0},
		{"HTTP/1.0 200 OK\r\n\r\nuntil close", 0},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokHTTP/1.0 200 OK\r\n\r\n", 0},
		{"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\"q\\\"x\"\r\nok\r\n0\r\n\r\n", 0},
		// finding 4: malformed
		{"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok", 0},
		{"HTTP/1.1 200 OK\r\nX-A: a\nContent-Length: 2\r\n\r\nok", 0},
		{"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\n folded\r\n\r\n", 0},
		{"HTTP/1.1 099 Low\r\n\r\n", 0},
	} {
		f.Add([]byte(s.b), s.methods)
	}
	f.Fuzz(func(t *testing.T, b []byte, methods uint8) {
		ourR := bytes.NewReader(b)
		ours := bufio.NewReaderSize(ourR, 4096)
		refR := bytes.NewReader(b)
		ref := bufio.NewReaderSize(refR, 4096)
		consumed := func(r *bytes.Reader, br *bufio.Reader) int { return len(b) - r.Len() - br.Buffered() }
		var m msg
		for i := 0; i < 8; i++ {
			if ours.Buffered() == 0 && ourR.Len() == 0 {
				return // the connection ended between messages
			}
			method := "GET"
			if methods&(1<<i) != 0 {
				method = "HEAD"
			}
			// Ours, as forwardResponse reads it.
			err := m.readHead(ours, 1<<20, 1024)
			if err == nil {
				err = m.parseStatusLine()
			}
			var fr framing
			var body bytes.Buffer
			if err == nil {
				fr = m.responseFraming(method == "HEAD")
				w := bufio.NewWriter(&body)
				err = copyResponseBody(w, ours, fr, m.contentLength, true)
				w.Flush()
			}
			// net/http's.
			resp, rerr := http.ReadResponse(ref, &http.Request{Method: method})
			var rbody []byte
			if rerr == nil {
				rbody, rerr = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err != nil {
				return // ours rejects (or the input ended): stricter is allowed
			}
			if rerr != nil {
				if acceptedOnPurpose(&m, rerr) {
					return
				}
				t.Fatalf("message %d: ours accepts (status %d, framing %d, body %q), net/http rejects: %v\ninput %q", i, m.status, fr, body.Bytes(), rerr, b)
			}
			if resp.StatusCode != m.status {
				t.Fatalf("message %d: status ours %d, net/http %d\ninput %q", i, m.status, resp.StatusCode, b)
			}
			if got, want := ourHeaders(&m), refHeaders(resp.Header); !slices.Equal(got, want) {
				t.Fatalf("message %d: header set\nours    %q\nnet/http %q\ninput %q", i, got, want, b)
			}
			if !bytes.Equal(body.Bytes(), rbody) {
				t.Fatalf("message %d: body ours %q, net/http %q\ninput %q", i, body.Bytes(), rbody, b)
			}
			if co, cr := consumed(ourR, ours), consumed(refR, ref); co != cr {
				t.Fatalf("message %d ends at byte %d for ours, %d for net/http\ninput %q", i, co, cr, b)
			}
			if m.status == http.StatusSwitchingProtocols || fr == closeContent || m.close {
				return // nothing after this message is HTTP/1.1 on this connection for us
			}
		}
	})
}

// acceptedOnPurpose: net/http's rejection is one of the listed differences.
func acceptedOnPurpose(m *msg, err error) bool {
	switch {
	case strings.Contains(err.Error(), "bad trailer key"):
		_, ok := m.get("trailer")
		return ok // we do not interpret Trailer
	case strings.Contains(err.Error(), "multiple Content-Length headers"):
		return m.contentLength >= 0 || m.chunked // ours checked the values are one number
	}
	return false
}

// ourHeaders is our field set as "Canonical-Key: value", sorted, without the framing
// fields net/http moves out of Header (Transfer-Encoding always; Content-Length and
// Trailer for chunked messages), which the framing and body comparisons cover.
func ourHeaders(m *msg) []string {
	var out []string
	for i := range m.fields {
		k := textproto.CanonicalMIMEHeaderKey(string(m.name(i)))
		if framingKey(k) {
			continue
		}
		out = append(out, k+": "+string(m.value(i)))
	}
	slices.Sort(out)
	return out
}

func refHeaders(h http.Header) []string {
	var out []string
	for k, vs := range h {
		if framingKey(k) {
			continue
		}
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	slices.Sort(out)
	return out
}

func framingKey(k string) bool {
	return k == "Transfer-Encoding" || k == "Content-Length" || k == "Trailer"
}
