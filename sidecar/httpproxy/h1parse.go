package httpproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Parse errors map to 4xx for clients and 502 for upstreams.
var (
	errHeaderTooLarge = errors.New("header section too large")
	errMalformed      = errors.New("malformed HTTP/1.1 message")
	errUnsupportedTE  = errors.New("unsupported transfer-encoding")
)

// field locates one header line inside msg.buf by offsets (buf may grow while reading).
type field struct{ ns, ne, vs, ve int32 }

// msg is a parsed HTTP/1.x start line and header section, reused across requests on
// one connection. Only what routing and framing need is interpreted; everything else
// is forwarded as the bytes that arrived.
type msg struct {
	buf    []byte // start line then header lines, CRLF stripped, each line once
	start  int    // end of the start line in buf
	fields []field
	// start line, as offsets into buf
	m0, m1, t0, t1, p0, p1 int // request: method, target, proto; response: proto, status, reason
	status                 int

	contentLength int64 // -1: not given
	chunked       bool
	close         bool // connection closes after this message
	http10        bool
	hostIdx       int // field index of Host, -1 if none
	expect100     bool
	upgrade       bool
}

func (m *msg) reset() {
	m.buf = m.buf[:0]
	m.fields = m.fields[:0]
	m.contentLength = -1
	m.chunked, m.close, m.http10, m.expect100, m.upgrade = false, false, false, false, false
	m.hostIdx = -1
	m.status = 0
}

// str returns a string view of buf[a:b] without copying; valid until the next read
// into m, which is longer than any routing decision lives.
func (m *msg) str(a, b int) string {
	if a == b {
		return ""
	}
	return unsafe.String(&m.buf[a], b-a)
}

func (m *msg) name(i int) []byte  { f := m.fields[i]; return m.buf[f.ns:f.ne] }
func (m *msg) value(i int) []byte { f := m.fields[i]; return m.buf[f.vs:f.ve] }

// get returns the first header value named lname (lower case), case-insensitively.
func (m *msg) get(lname string) (string, bool) {
	for i, f := range m.fields {
		if int(f.ne-f.ns) == len(lname) && equalFoldLower(m.buf[f.ns:f.ne], lname) {
			return m.str(int(m.fields[i].vs), int(m.fields[i].ve)), true
		}
	}
	return "", false
}

func equalFoldLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// readHead reads a start line and header section from r into m.
func (m *msg) readHead(r *bufio.Reader, maxBytes int, maxFields int) error {
	m.reset()
	first := true
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return errHeaderTooLarge
			}
			if first && len(line) == 0 {
				return err // clean EOF between messages
			}
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		line = trimEOL(line)
		if first {
			if len(line) == 0 {
				continue // RFC 9112 §2.2: ignore leading empty lines
			}
			first = false
			m.buf = append(m.buf, line...)
			m.start = len(m.buf)
			continue
		}
		if len(line) == 0 {
			return nil
		}
		if len(m.buf)+len(line) > maxBytes {
			return errHeaderTooLarge
		}
		if len(m.fields) >= maxFields {
			return errHeaderTooLarge
		}
		if line[0] == ' ' || line[0] == '\t' {
			return fmt.Errorf("%w: obsolete line folding", errMalformed)
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return fmt.Errorf("%w: header line without name", errMalformed)
		}
		base := int32(len(m.buf))
		m.buf = append(m.buf, line...)
		vs, ve := c+1, len(line)
		for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
			vs++
		}
		for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
			ve--
		}
		for i := 0; i < c; i++ {
			if !isTokenChar(line[i]) {
				return fmt.Errorf("%w: invalid header name", errMalformed)
			}
		}
		m.fields = append(m.fields, field{ns: base, ne: base + int32(c), vs: base + int32(vs), ve: base + int32(ve)})
	}
}

func trimEOL(b []byte) []byte {
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

func isTokenChar(c byte) bool {
	return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '<' && c != '>' && c != '@' && c != ',' &&
		c != ';' && c != ':' && c != '\\' && c != '"' && c != '/' && c != '[' && c != ']' && c != '?' &&
		c != '=' && c != '{' && c != '}'
}

// parseRequestLine splits "METHOD SP target SP HTTP/1.x".
func (m *msg) parseRequestLine() error {
	l := m.buf[:m.start]
	s1 := bytes.IndexByte(l, ' ')
	if s1 <= 0 {
		return fmt.Errorf("%w: request line", errMalformed)
	}
	s2 := bytes.IndexByte(l[s1+1:], ' ')
	if s2 <= 0 {
		return fmt.Errorf("%w: request line", errMalformed)
	}
	s2 += s1 + 1
	m.m0, m.m1, m.t0, m.t1, m.p0, m.p1 = 0, s1, s1+1, s2, s2+1, len(l)
	switch string(l[m.p0:m.p1]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		m.http10 = true
		m.close = true
	default:
		return fmt.Errorf("%w: unsupported protocol %q", errMalformed, l[m.p0:m.p1])
	}
	return m.parseFraming()
}

// parseStatusLine splits "HTTP/1.x SP code SP reason".
func (m *msg) parseStatusLine() error {
	l := m.buf[:m.start]
	if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[8] != ' ' {
		return fmt.Errorf("%w: status line", errMalformed)
	}
	code := 0
	for _, c := range l[9:12] {
		if c < '0' || c > '9' {
			return fmt.Errorf("%w: status code", errMalformed)
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 || (len(l) > 12 && l[12] != ' ') {
		return fmt.Errorf("%w: status code", errMalformed)
	}
	m.status = code
	m.http10 = l[7] == '0'
	m.close = m.http10
	return m.parseFraming()
}

// parseFraming reads the headers that decide framing and connection reuse.
func (m *msg) parseFraming() error {
	for i := range m.fields {
		n := m.name(i)
		switch len(n) {
		case 4:
			if equalFoldLower(n, "host") {
				if m.hostIdx >= 0 {
					return fmt.Errorf("%w: duplicate host", errMalformed)
				}
				m.hostIdx = i
			}
		case 6:
			if equalFoldLower(n, "expect") && equalFoldLower(m.value(i), "100-continue") {
				m.expect100 = true
			}
		case 7:
			if equalFoldLower(n, "upgrade") {
				m.upgrade = true
			}
		case 10:
			if equalFoldLower(n, "connection") {
				v := m.value(i)
				if containsTokenFold(v, "close") {
					m.close = true
				} else if m.http10 && containsTokenFold(v, "keep-alive") {
					m.close = false
				}
			}
		case 14:
			if equalFoldLower(n, "content-length") {
				v, ok := parseUint(m.value(i))
				if !ok || (m.contentLength >= 0 && m.contentLength != v) {
					return fmt.Errorf("%w: content-length", errMalformed)
				}
				m.contentLength = v
			}
		case 17:
			if equalFoldLower(n, "transfer-encoding") {
				v := m.value(i)
				if !equalFoldLower(v, "chunked") {
					return errUnsupportedTE
				}
				m.chunked = true
			}
		}
	}
	if m.chunked {
		// RFC 9112 §6.3: transfer-encoding overrides content-length, and a message
		// with both may be an attack: its connection carries nothing after it
		// (§6.1 for requests; for a response, the upstream connection is dropped).
		if m.contentLength >= 0 {
			m.close = true
		}
		m.contentLength = -1
	}
	return nil
}

func parseUint(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func containsTokenFold(v []byte, tok string) bool {
	for len(v) > 0 {
		i := bytes.IndexByte(v, ',')
		var t []byte
		if i < 0 {
			t, v = v, nil
		} else {
			t, v = v[:i], v[i+1:]
		}
		t = bytes.TrimSpace(t)
		if len(t) == len(tok) && equalFoldLower(t, tok) {
			return true
		}
	}
	return false
}

// hopByHop reports headers a proxy must not forward (RFC 9110 §7.6.1), plus framing
// headers the proxy writes itself.
func hopByHop(n []byte) bool {
	switch len(n) {
	case 2:
		return equalFoldLower(n, "te")
	case 7:
		return equalFoldLower(n, "upgrade") || equalFoldLower(n, "trailer")
	case 10:
		return equalFoldLower(n, "connection") || equalFoldLower(n, "keep-alive")
	case 14:
		return equalFoldLower(n, "content-length")
	case 16:
		return equalFoldLower(n, "proxy-connection")
	case 17:
		return equalFoldLower(n, "transfer-encoding")
	case 18:
		return equalFoldLower(n, "proxy-authenticate")
	case 19:
		return equalFoldLower(n, "proxy-authorization")
	}
	return false
}

// writeFields writes every end-to-end header line followed by the framing headers.
func (m *msg) writeFields(w *bufio.Writer) {
	for i := range m.fields {
		f := m.fields[i]
		if hopByHop(m.buf[f.ns:f.ne]) {
			continue
		}
		w.Write(m.buf[f.ns:f.ve])
		w.WriteString("\r\n")
	}
	switch {
	case m.chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case m.contentLength >= 0:
		w.WriteString("Content-Length: ")
		// AvailableBuffer keeps the digits in w's buffer: no allocation.
		w.Write(appendInt(w.AvailableBuffer(), m.contentLength))
		w.WriteString("\r\n")
	}
}

func appendInt(b []byte, n int64) []byte {
	if n == 0 {
		return append(b, '0')
	}
	var tmp [20]byte
	i := len(tmp)
	for n > 0 {
		i--
		tmp[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, tmp[i:]...)
}

// copyN copies exactly n bytes through src's buffer without allocating; it flushes dst
// before blocking on src so streamed bodies are not held back.
func copyN(dst *bufio.Writer, src *bufio.Reader, n int64) error {
	for n > 0 {
		if src.Buffered() == 0 {
			if dst.Buffered() > 0 {
				if err := dst.Flush(); err != nil {
					return err
				}
			}
			if _, err := src.Peek(1); err != nil {
				if err == io.EOF {
					return io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := int64(src.Buffered())
		if k > n {
			k = n
		}
		b, _ := src.Peek(int(k))
		if _, err := dst.Write(b); err != nil {
			return err
		}
		src.Discard(int(k))
		n -= k
	}
	return nil
}

// copyUntilEOF copies a body delimited by connection close.
func copyUntilEOF(dst *bufio.Writer, src *bufio.Reader) error {
	for {
		if src.Buffered() == 0 && dst.Buffered() > 0 {
			if err := dst.Flush(); err != nil {
				return err
			}
		}
		if _, err := src.Peek(1); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		b, _ := src.Peek(src.Buffered())
		if _, err := dst.Write(b); err != nil {
			return err
		}
		src.Discard(len(b))
	}
}

// maxChunkLine bounds a chunk-size line (with extensions) and a trailer line.
const maxChunkLine = 4096

// copyChunked forwards a chunked body frame by frame, as received, validating sizes.
func copyChunked(dst *bufio.Writer, src *bufio.Reader) error { return transferChunked(dst, src, true) }

// dechunkBody copies only the content of a chunked body (for an HTTP/1.0 client,
// which cannot read chunked framing); trailers are dropped.
func dechunkBody(dst *bufio.Writer, src *bufio.Reader) error { return transferChunked(dst, src, false) }

// transferChunked reads and validates a chunked body from src, writing it to dst as
// received (raw) or as its content only.
func transferChunked(dst *bufio.Writer, src *bufio.Reader, raw bool) error {
	for {
		if src.Buffered() == 0 && dst.Buffered() > 0 {
			if err := dst.Flush(); err != nil {
				return err
			}
		}
		line, err := src.ReadSlice('\n')
		if err != nil {
			return chunkErr(err)
		}
		if len(line) > maxChunkLine {
			return fmt.Errorf("%w: chunk line too long", errMalformed)
		}
		size, ok := parseChunkSize(trimEOL(line))
		if !ok {
			return fmt.Errorf("%w: chunk size", errMalformed)
		}
		if raw {
			if _, err := dst.Write(line); err != nil {
				return err
			}
		}
		if size == 0 {
			// Trailer section, then the final CRLF.
			for {
				t, err := src.ReadSlice('\n')
				if err != nil {
					return chunkErr(err)
				}
				if raw {
					if _, err := dst.Write(t); err != nil {
						return err
					}
				}
				if len(trimEOL(t)) == 0 {
					return nil
				}
			}
		}
		if err := copyN(dst, src, size); err != nil {
			return err
		}
		crlf, err := src.ReadSlice('\n')
		if err != nil {
			return chunkErr(err)
		}
		if len(trimEOL(crlf)) != 0 {
			return fmt.Errorf("%w: chunk not terminated by CRLF", errMalformed)
		}
		if raw {
			if _, err := dst.Write(crlf); err != nil {
				return err
			}
		}
	}
}

func chunkErr(err error) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("%w: chunk line too long", errMalformed)
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseChunkSize(b []byte) (int64, bool) {
	if i := bytes.IndexByte(b, ';'); i >= 0 {
		b = b[:i]
	}
	b = bytes.TrimRight(b, " \t")
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case 'A' <= c && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}
