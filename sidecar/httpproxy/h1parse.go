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
	errURITooLong     = errors.New("request target too long")
	errMalformed      = errors.New("malformed HTTP/1.1 message")
	errUnsupportedTE  = errors.New("unsupported transfer-encoding")
)

// field locates one header line inside msg.buf by offsets (buf may grow while reading).
type field struct{ ns, ne, vs, ve int32 }

// span is a range of msg.buf.
type span struct{ s, e int32 }

// msg is a parsed HTTP/1.x start line and header section, reused across requests on
// one connection. Only what routing and framing need is interpreted; everything else
// is forwarded as the bytes that arrived.
type msg struct {
	buf    []byte // start line then header lines, CRLF stripped, each line once
	start  int    // end of the start line in buf
	fields []field
	conn   []span // tokens of the Connection header(s): headers to drop as hop-by-hop
	// start line, as offsets into buf
	m0, m1, t0, t1, p0, p1 int // request: method, target, proto; response: proto, status, reason
	status                 int
	// Request target in origin form: u0..u1 is the path and query sent upstream
	// (the whole target unless absolute-form); a0..a1 the authority of an
	// absolute-form target (abs), which replaces Host (RFC 9112 §3.2.2).
	u0, u1, a0, a1 int
	abs            bool

	contentLength int64 // -1: not given
	chunked       bool
	close         bool // connection closes after this message
	http10        bool
	hostIdx       int // field index of Host, -1 if none
	expect100     bool
	upgrade       bool
	leadingCRLF   bool // empty lines came before the start line (allowed for requests only)
	teIdx         int  // field index of a TE request header that asks for trailers, -1 if none
	maxFields     int  // the limit readHead ran with; bounds Connection tokens too
}

func (m *msg) reset() {
	m.buf = m.buf[:0]
	m.fields = m.fields[:0]
	m.conn = m.conn[:0]
	m.contentLength = -1
	m.chunked, m.close, m.http10, m.expect100, m.upgrade, m.abs, m.leadingCRLF = false, false, false, false, false, false, false
	m.hostIdx, m.teIdx = -1, -1
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

// path is the request target sent upstream and routed on (origin form).
func (m *msg) path() string {
	if m.abs && m.u0 == m.u1 {
		return "/" // "http://host" means "/" (RFC 9112 §3.2.2)
	}
	return m.str(m.u0, m.u1)
}

// authority is what the request is routed by: an absolute-form target's authority,
// else the Host header.
func (m *msg) authority() (string, bool) {
	if m.abs {
		return m.str(m.a0, m.a1), true
	}
	if m.hostIdx < 0 {
		return "", false
	}
	f := m.fields[m.hostIdx]
	return m.str(int(f.vs), int(f.ve)), true
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

// badLineByte marks bytes no line of a message head may hold (RFC 9112 §2.2, RFC 9110
// §5.5): every control character but HTAB, DEL, and so bare CR and NUL. A bare LF
// cannot appear inside a line: it ends one, and readHead rejects a line it ends
// without CR. Rejecting (not replacing with SP, which RFC 9110 §5.5 also allows for
// CR and NUL in values) keeps what we forward byte-identical to what we parsed.
var badLineByte = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = c != '\t'
	}
	t[0x7f] = true
	return t
}()

// readLine returns the next CRLF-terminated line without its CRLF; a line ended by a
// bare LF, or holding a control byte, is malformed.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", errMalformed)
	}
	line = line[:len(line)-2]
	for _, c := range line {
		if badLineByte[c] {
			return nil, fmt.Errorf("%w: control character 0x%02x in line", errMalformed, c)
		}
	}
	return line, nil
}

// readHead reads a start line and header section from r into m. A start line longer
// than r's buffer is errURITooLong (only a request target makes one that long).
func (m *msg) readHead(r *bufio.Reader, maxBytes int, maxFields int) error {
	m.reset()
	m.maxFields = maxFields
	first := true
	skipped := 0
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				if first {
					return errURITooLong
				}
				return errHeaderTooLarge
			}
			if first && len(line) == 0 && skipped == 0 {
				return err // clean EOF between messages
			}
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if first {
			if len(line) == 0 {
				// RFC 9112 §2.2: ignore empty lines before the start line; they count
				// against the header bound so a stream of them ends.
				if skipped += 2; skipped > maxBytes {
					return errHeaderTooLarge
				}
				continue
			}
			first = false
			m.leadingCRLF = skipped > 0
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
		vs, ve, ok := splitField(line)
		if !ok {
			return fmt.Errorf("%w: header line %q", errMalformed, clip(line))
		}
		base := int32(len(m.buf))
		m.buf = append(m.buf, line...)
		c := bytes.IndexByte(line, ':')
		m.fields = append(m.fields, field{ns: base, ne: base + int32(c), vs: base + int32(vs), ve: base + int32(ve)})
	}
}

// splitField checks one header (or trailer) line, "token: value" with the value free
// of control bytes (readLine checked those), and returns the trimmed value's bounds.
// Obsolete line folding (a line starting with SP/HTAB) and whitespace before the
// colon are malformed (RFC 9112 §5.1, §5.2).
func splitField(line []byte) (vs, ve int, ok bool) {
	c := bytes.IndexByte(line, ':')
	if c <= 0 {
		return 0, 0, false
	}
	for i := 0; i < c; i++ {
		if !isTokenChar(line[i]) {
			return 0, 0, false
		}
	}
	vs, ve = c+1, len(line)
	for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
		vs++
	}
	for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
		ve--
	}
	return vs, ve, true
}

// clip bounds bytes quoted in an error message.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func isTokenChar(c byte) bool {
	return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '<' && c != '>' && c != '@' && c != ',' &&
		c != ';' && c != ':' && c != '\\' && c != '"' && c != '/' && c != '[' && c != ']' && c != '?' &&
		c != '=' && c != '{' && c != '}'
}

// parseRequestLine splits "METHOD SP target SP HTTP/1.x" (RFC 9112 §3) and reads the
// framing headers. The method is a token; the target has no control bytes or spaces
// and is origin-form, absolute-form ("http://authority/path", routed by its
// authority), "*" or, for CONNECT, authority-form; a target longer than maxURI is
// errURITooLong.
func (m *msg) parseRequestLine(maxURI int) error {
	l := m.buf[:m.start]
	s1 := bytes.IndexByte(l, ' ')
	if s1 <= 0 {
		return fmt.Errorf("%w: request line", errMalformed)
	}
	for _, c := range l[:s1] {
		if !isTokenChar(c) {
			return fmt.Errorf("%w: method", errMalformed)
		}
	}
	s2 := bytes.IndexByte(l[s1+1:], ' ')
	if s2 < 0 && len(l)-s1-1 > maxURI {
		return errURITooLong
	}
	if s2 <= 0 {
		return fmt.Errorf("%w: request line", errMalformed)
	}
	s2 += s1 + 1
	m.m0, m.m1, m.t0, m.t1, m.p0, m.p1 = 0, s1, s1+1, s2, s2+1, len(l)
	if m.t1-m.t0 > maxURI {
		return errURITooLong
	}
	switch string(l[m.p0:m.p1]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		m.http10 = true
		m.close = true
	default:
		return fmt.Errorf("%w: unsupported protocol %q", errMalformed, clip(l[m.p0:m.p1]))
	}
	if err := m.parseTarget(); err != nil {
		return err
	}
	if err := m.parseFraming(); err != nil {
		return err
	}
	if m.hostIdx < 0 && !m.http10 && !m.abs {
		return fmt.Errorf("%w: HTTP/1.1 request without Host", errMalformed) // RFC 9112 §3.2
	}
	if m.hostIdx >= 0 {
		for _, c := range m.value(m.hostIdx) {
			if !isHostChar(c) {
				return fmt.Errorf("%w: invalid Host", errMalformed)
			}
		}
	}
	return nil
}

// parseTarget classifies the request target and sets the origin-form path (u0..u1)
// and, for absolute-form, the authority (a0..a1).
func (m *msg) parseTarget() error {
	t := m.buf[m.t0:m.t1]
	for _, c := range t {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: request target", errMalformed)
		}
	}
	m.u0, m.u1 = m.t0, m.t1
	switch {
	case t[0] == '/':
		return checkPath(t)
	case m.m1-m.m0 == 7 && string(m.buf[m.m0:m.m1]) == "CONNECT": // authority-form
		if !validAuthority(t) {
			return fmt.Errorf("%w: CONNECT authority", errMalformed)
		}
		// Routed (and refused, 501) by its authority, like absolute-form.
		m.abs, m.a0, m.a1, m.u0 = true, m.t0, m.t1, m.t1
		return nil
	case len(t) == 1 && t[0] == '*': // asterisk-form, OPTIONS
		return nil
	}
	var n int
	switch {
	case len(t) > 7 && equalFoldLower(t[:7], "http://"):
		n = 7
	case len(t) > 8 && equalFoldLower(t[:8], "https://"):
		n = 8
	default:
		return fmt.Errorf("%w: request target is neither a path nor an http(s) URL", errMalformed)
	}
	a := n
	for a < len(t) && t[a] != '/' && t[a] != '?' && t[a] != '#' {
		a++
	}
	if a == n {
		return fmt.Errorf("%w: absolute-form target without a host", errMalformed)
	}
	if !validAuthority(t[n:a]) {
		return fmt.Errorf("%w: authority of absolute-form target", errMalformed)
	}
	if a < len(t) && t[a] != '/' {
		// "http://h?q" is "/?q" upstream; we would have to rewrite it: refuse instead.
		return fmt.Errorf("%w: absolute-form target with a query but no path", errMalformed)
	}
	if err := checkPath(t[a:]); err != nil {
		return err
	}
	m.abs = true
	m.a0, m.a1 = m.t0+n, m.t0+a
	m.u0 = m.t0 + a
	return nil
}

// checkPath checks the percent-encoding of a target's path (RFC 3986 §2.1: "%"
// then two hex digits); the query is forwarded unchecked, as net/http does.
func checkPath(t []byte) error {
	for i := 0; i < len(t) && t[i] != '?'; i++ {
		if t[i] == '%' && (i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2])) {
			return fmt.Errorf("%w: bad percent-encoding in request path", errMalformed)
		}
	}
	return nil
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// validAuthority accepts host [":" port] with host a reg-name of unreserved and
// sub-delim bytes or a bracketed IP literal, and port digits (RFC 3986 §3.2).
// Userinfo ("user@") is refused (deprecated, RFC 9110 §4.2.4), as is
// percent-encoding in the host (nothing here needs it).
func validAuthority(a []byte) bool {
	h := a
	port := []byte(nil)
	if len(a) > 0 && a[0] == '[' {
		e := bytes.IndexByte(a, ']')
		if e < 2 {
			return false
		}
		for _, c := range a[1:e] {
			if !isHex(c) && c != ':' && c != '.' {
				return false
			}
		}
		h, port = nil, a[e+1:]
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else if i := bytes.IndexByte(a, ':'); i >= 0 {
		h, port = a[:i], a[i+1:]
	}
	for _, c := range h {
		if !isHostChar(c) || c == '@' || c == '%' || c == ':' || c == '[' || c == ']' {
			return false
		}
	}
	if len(a) == 0 || (h != nil && len(h) == 0) {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isHostChar: bytes of reg-name, IP literals and a port (RFC 3986 §3.2.2), plus '@'
// for the caller to refuse.
func isHostChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '[', ']', '%', '@':
		return true
	}
	return false
}

// parseStatusLine splits "HTTP/1.x SP code SP reason".
func (m *msg) parseStatusLine() error {
	l := m.buf[:m.start]
	if m.leadingCRLF {
		// RFC 9112 §2.2 lets a server skip empty lines before a request; before a
		// response they are bytes the previous message did not account for.
		return fmt.Errorf("%w: empty line before the status line", errMalformed)
	}
	if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[7] < '0' || l[7] > '9' || l[8] != ' ' {
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
	if err := m.parseFraming(); err != nil {
		return err
	}
	if m.http10 && m.chunked {
		// RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing.
		return fmt.Errorf("%w: Transfer-Encoding in an HTTP/1.0 response", errMalformed)
	}
	return nil
}

// framing is how a response's content is delimited (RFC 9112 §6.3).
type framing uint8

const (
	noContent      framing = iota // HEAD, 1xx, 204, 304: the message ends at its head
	chunkedContent                // chunked transfer coding
	lengthContent                 // exactly contentLength bytes (maybe 0)
	closeContent                  // until the connection closes
)

// responseFraming is the framing of response m to a request that was HEAD or not;
// the status decides before any header does.
func (m *msg) responseFraming(head bool) framing {
	switch {
	case head || m.status < 200 || m.status == 204 || m.status == 304:
		return noContent
	case m.chunked:
		return chunkedContent
	case m.contentLength >= 0:
		return lengthContent
	}
	return closeContent
}

// copyResponseBody copies the content of a response framed fr (n bytes for
// lengthContent) from src to dst: chunked as received, or decoded when dechunk.
func copyResponseBody(dst *bufio.Writer, src *bufio.Reader, fr framing, n int64, dechunk bool) error {
	switch fr {
	case chunkedContent:
		if dechunk {
			return dechunkBody(dst, src)
		}
		return copyChunked(dst, src)
	case lengthContent:
		return copyN(dst, src, n)
	case closeContent:
		return copyUntilEOF(dst, src)
	}
	return nil
}

// parseFraming reads the headers that decide framing and connection reuse
// (RFC 9112 §6). Requests and responses share it; m.status is 0 for a request.
func (m *msg) parseFraming() error {
	te, cl, badTrailer := -1, false, false
	for i := range m.fields {
		n := m.name(i)
		switch len(n) {
		case 2:
			if m.status == 0 && equalFoldLower(n, "te") && containsTokenFold(m.value(i), "trailers") {
				m.teIdx = i
			}
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
			switch {
			case equalFoldLower(n, "upgrade"):
				m.upgrade = true
			case equalFoldLower(n, "trailer"):
				// RFC 9110 §6.5.1: framing fields cannot be trailers; checked below
				// when the body is chunked (as net/http does).
				v := m.value(i)
				badTrailer = badTrailer || containsTokenFold(v, "transfer-encoding") ||
					containsTokenFold(v, "content-length") || containsTokenFold(v, "trailer")
			}
		case 10:
			if equalFoldLower(n, "connection") {
				if err := m.connectionTokens(i); err != nil {
					return err
				}
			}
		case 14:
			if equalFoldLower(n, "content-length") {
				v, ok := parseUint(m.value(i))
				if !ok || (m.contentLength >= 0 && m.contentLength != v) {
					return fmt.Errorf("%w: content-length", errMalformed)
				}
				m.contentLength = v
				cl = true
			}
		case 17:
			if equalFoldLower(n, "transfer-encoding") {
				if te >= 0 {
					return fmt.Errorf("%w: more than one Transfer-Encoding header", errMalformed)
				}
				te = i
			}
		}
	}
	if te < 0 {
		return nil
	}
	if m.status == 0 && m.http10 {
		// RFC 9112 §6.1: an HTTP/1.0 client cannot have meant chunked framing.
		return fmt.Errorf("%w: Transfer-Encoding in an HTTP/1.0 request", errMalformed)
	}
	if err := checkTE(m.value(te)); err != nil {
		return err
	}
	if badTrailer {
		return fmt.Errorf("%w: Trailer names a framing field", errMalformed)
	}
	m.chunked = true
	m.contentLength = -1 // RFC 9112 §6.3: transfer-encoding overrides content-length
	if cl {
		// RFC 9112 §6.1: both framings may be a smuggling attempt; the message is read
		// by its Transfer-Encoding (Content-Length is not forwarded) and the
		// connection is closed after it.
		m.close = true
	}
	return nil
}

// checkTE accepts exactly "chunked": chunked repeated or not last is malformed
// (RFC 9112 §6.1, §7); any other coding is errUnsupportedTE (501, RFC 9112 §6.1).
func checkTE(v []byte) error {
	seen, last := false, false
	for rest := v; ; {
		i := bytes.IndexByte(rest, ',')
		t := rest
		if i >= 0 {
			t = rest[:i]
		}
		t = bytes.Trim(t, " \t")
		last = false
		if len(t) == 0 {
			return fmt.Errorf("%w: empty transfer coding", errMalformed)
		}
		if equalFoldLower(t, "chunked") {
			if seen {
				return fmt.Errorf("%w: chunked applied twice", errMalformed)
			}
			seen, last = true, true
		}
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	switch {
	case seen && !last:
		return fmt.Errorf("%w: chunked is not the last transfer coding", errMalformed)
	case !seen || len(bytes.Trim(v, " \t")) != len("chunked"):
		return errUnsupportedTE
	}
	return nil
}

// connectionTokens records the options of Connection field i: close and
// keep-alive decide reuse; every token names a header to drop as hop-by-hop.
func (m *msg) connectionTokens(i int) error {
	f := m.fields[i]
	for p := int(f.vs); p < int(f.ve); {
		e := p
		for e < int(f.ve) && m.buf[e] != ',' {
			e++
		}
		s, t := p, e
		for s < t && (m.buf[s] == ' ' || m.buf[s] == '\t') {
			s++
		}
		for t > s && (m.buf[t-1] == ' ' || m.buf[t-1] == '\t') {
			t--
		}
		p = e + 1
		if s == t {
			continue
		}
		tok := m.buf[s:t]
		for _, c := range tok {
			if !isTokenChar(c) {
				return fmt.Errorf("%w: Connection option", errMalformed)
			}
		}
		switch {
		case equalFoldLower(tok, "close"):
			m.close = true
		case equalFoldLower(tok, "keep-alive"):
			if m.http10 {
				m.close = false
			}
		}
		if len(m.conn) >= m.maxFields {
			return fmt.Errorf("%w: more Connection options than header fields allowed", errMalformed)
		}
		m.conn = append(m.conn, span{int32(s), int32(t)})
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

// hopByHop reports headers a proxy never forwards (RFC 9110 §7.6.1), whatever
// Connection says, plus the framing headers the proxy writes itself.
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

// isHopByHop is the one hop-by-hop filter, for requests and responses alike: field
// i is not forwarded when its name is hop-by-hop by definition (hopByHop) or is
// named by the message's Connection header (RFC 9110 §7.6.1).
func (m *msg) isHopByHop(i int) bool {
	n := m.name(i)
	if hopByHop(n) {
		return true
	}
	for _, s := range m.conn {
		if int(s.e-s.s) == len(n) && bytes.EqualFold(m.buf[s.s:s.e], n) {
			return true
		}
	}
	return false
}

// writeFields writes every end-to-end header line followed by the framing headers.
func (m *msg) writeFields(w *bufio.Writer) { m.writeFieldsKeep(w, false) }

// writeFieldsKeep is writeFields; upgrade keeps the Upgrade header and writes
// "Connection: upgrade" for a protocol switch being forwarded.
func (m *msg) writeFieldsKeep(w *bufio.Writer, upgrade bool) { m.writeFieldsExcept(w, upgrade, "") }

// writeFieldsExcept is writeFieldsKeep leaving out the fields named except (a
// lower-case name the proxy writes itself; "" leaves out none).
func (m *msg) writeFieldsExcept(w *bufio.Writer, upgrade bool, except string) {
	for i := range m.fields {
		f := m.fields[i]
		if except != "" && int(f.ne-f.ns) == len(except) && equalFoldLower(m.buf[f.ns:f.ne], except) {
			continue
		}
		if m.isHopByHop(i) {
			if upgrade && len(m.name(i)) == 7 && equalFoldLower(m.name(i), "upgrade") {
				w.Write(m.buf[f.ns:f.ve])
				w.WriteString("\r\n")
			}
			continue
		}
		if m.abs && i == m.hostIdx {
			continue // replaced by the target's authority (writeRequestHead)
		}
		w.Write(m.buf[f.ns:f.ve])
		w.WriteString("\r\n")
	}
	if upgrade {
		w.WriteString("Connection: upgrade\r\n")
	}
	if m.teIdx >= 0 {
		// TE is hop-by-hop, but "trailers" says the client reads trailers, which
		// gRPC-style upstreams check end to end; other codings we do not relay.
		w.WriteString("TE: trailers\r\n")
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

// writeRequestHead writes the request line in origin form and the header section
// (without the blank line ending it). An absolute-form target's authority becomes
// the Host header (RFC 9112 §3.2.2).
func (m *msg) writeRequestHead(w *bufio.Writer) { m.writeRequestHeadKeep(w, false) }

// writeRequestHeadKeep is writeRequestHead; upgrade keeps the protocol switch asked
// for (writeFieldsKeep).
func (m *msg) writeRequestHeadKeep(w *bufio.Writer, upgrade bool) {
	w.Write(m.buf[m.m0:m.m1])
	w.WriteByte(' ')
	w.WriteString(m.path())
	w.WriteString(" HTTP/1.1\r\n")
	switch {
	case m.abs:
		w.WriteString("Host: ")
		w.Write(m.buf[m.a0:m.a1])
		w.WriteString("\r\n")
	case m.hostIdx < 0:
		// An HTTP/1.0 request without Host goes upstream as HTTP/1.1, which must
		// have one: empty when the authority is unknown (RFC 9112 §3.2).
		w.WriteString("Host: \r\n")
	}
	m.writeFieldsKeep(w, upgrade)
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

// MaxTrailerBytes bounds the trailer section of a chunked body (every trailer line
// with its CRLF). A package constant rather than a Config field: the one chunked
// decoder serves both directions and the bridge, none of which carry a Config.
const MaxTrailerBytes = 16 << 10

// copyChunked forwards a chunked body frame by frame, as received, after checking
// each frame: the chunk-size line and its extensions (parseChunkLine), the CRLF
// after the data, and each trailer line (a header line: token, colon, no control
// bytes). Nothing malformed is written to dst: a frame is checked before any of
// its bytes are. Malformed input is errMalformed; a read error of src is returned
// as is (io.ErrUnexpectedEOF at EOF); dst's write errors are returned as is.
// It is the one chunked-body checker: requests, responses and poolBody use it.
func copyChunked(dst *bufio.Writer, src *bufio.Reader) error { return transferChunked(dst, src, true) }

// dechunkBody copies only the content of a chunked body (for an HTTP/1.0 client,
// which cannot read chunked framing); trailers are checked and dropped.
func dechunkBody(dst *bufio.Writer, src *bufio.Reader) error { return transferChunked(dst, src, false) }

// transferChunked reads and checks a chunked body from src (as copyChunked says),
// writing it to dst as received (raw) or as its content only.
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
		size, err := parseChunkLine(line)
		if err != nil {
			return err
		}
		if raw {
			if _, err := dst.Write(line); err != nil {
				return err
			}
		}
		if size == 0 {
			return copyTrailers(dst, src, raw)
		}
		if err := copyN(dst, src, size); err != nil {
			return err
		}
		crlf, err := src.ReadSlice('\n')
		if err != nil {
			return chunkErr(err)
		}
		if len(crlf) != 2 || crlf[0] != '\r' {
			return fmt.Errorf("%w: chunk data not followed by CRLF", errMalformed)
		}
		if raw {
			if _, err := dst.Write(crlf); err != nil {
				return err
			}
		}
	}
}

// copyTrailers checks the trailer section after the last chunk, through the blank
// line ending the body, and forwards it when raw.
func copyTrailers(dst *bufio.Writer, src *bufio.Reader, raw bool) error {
	total := 0
	for {
		t, err := readTrailer(src, &total)
		if err != nil {
			return err
		}
		if raw {
			if _, err := dst.Write(t); err != nil {
				return err
			}
		}
		if len(t) == 2 {
			return nil
		}
	}
}

// readTrailer reads and checks one trailer line (returned with its CRLF; "\r\n"
// ends the section), counting it in *total against MaxTrailerBytes.
func readTrailer(src *bufio.Reader, total *int) ([]byte, error) {
	t, err := src.ReadSlice('\n')
	if err != nil {
		return nil, chunkErr(err)
	}
	if *total += len(t); *total > MaxTrailerBytes || len(t) > maxChunkLine {
		return nil, fmt.Errorf("%w: trailer section too long", errMalformed)
	}
	if len(t) < 2 || t[len(t)-2] != '\r' {
		return nil, fmt.Errorf("%w: trailer line not ended by CRLF", errMalformed)
	}
	if len(t) == 2 {
		return t, nil
	}
	body := t[:len(t)-2]
	for _, c := range body {
		if badLineByte[c] {
			return nil, fmt.Errorf("%w: control character 0x%02x in trailer", errMalformed, c)
		}
	}
	if _, _, ok := splitField(body); !ok {
		return nil, fmt.Errorf("%w: trailer line %q", errMalformed, clip(body))
	}
	return t, nil
}

// chunkedReader reads the content of a chunked body (the bridge to HTTP/2 reframes
// it), with the same checks as copyChunked: the one chunk-line parser and trailer
// check. Trailers are checked and dropped.
type chunkedReader struct {
	r     *bufio.Reader
	left  int64 // bytes left in the current chunk
	total int   // trailer bytes read
	done  bool
	err   error
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			c.err = chunkErr(err)
			return 0, c.err
		}
		if c.left, c.err = parseChunkLine(line); c.err != nil {
			return 0, c.err
		}
		if c.left == 0 {
			for {
				t, err := readTrailer(c.r, &c.total)
				if err != nil {
					c.err = err
					return 0, err
				}
				if len(t) == 2 {
					c.done = true
					return 0, io.EOF
				}
			}
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		c.err = err
		return n, err
	}
	if c.left == 0 {
		crlf, err := c.r.ReadSlice('\n')
		if err != nil || len(crlf) != 2 || crlf[0] != '\r' {
			c.err = fmt.Errorf("%w: chunk data not followed by CRLF", errMalformed)
			return n, c.err
		}
	}
	return n, nil
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

// parseChunkLine checks a chunk-size line as read, CRLF included (RFC 9112 §7.1):
//
//	chunk-size *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ) CRLF
//
// and returns the size. Extensions are forwarded, never interpreted.
func parseChunkLine(line []byte) (int64, error) {
	if len(line) > maxChunkLine {
		return 0, fmt.Errorf("%w: chunk line too long", errMalformed)
	}
	if len(line) < 3 || line[len(line)-2] != '\r' || line[len(line)-1] != '\n' {
		return 0, fmt.Errorf("%w: chunk-size line not ended by CRLF", errMalformed)
	}
	b := line[:len(line)-2]
	i := 0
	var n int64
	for ; i < len(b); i++ {
		c := b[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i >= 15 {
			return 0, fmt.Errorf("%w: chunk size too large", errMalformed)
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, fmt.Errorf("%w: chunk size", errMalformed)
	}
	for i < len(b) {
		i = skipBWS(b, i)
		if i == len(b) || b[i] != ';' {
			return 0, fmt.Errorf("%w: chunk size", errMalformed)
		}
		i = skipBWS(b, i+1)
		j := skipToken(b, i)
		if j == i {
			return 0, fmt.Errorf("%w: chunk extension name", errMalformed)
		}
		i = skipBWS(b, j)
		if i == len(b) || b[i] != '=' {
			if i < len(b) && b[i] != ';' {
				return 0, fmt.Errorf("%w: chunk extension", errMalformed)
			}
			continue
		}
		i = skipBWS(b, i+1)
		if i < len(b) && b[i] == '"' {
			j, ok := skipQuoted(b, i)
			if !ok {
				return 0, fmt.Errorf("%w: chunk extension quoted value", errMalformed)
			}
			i = j
		} else {
			j := skipToken(b, i)
			if j == i {
				return 0, fmt.Errorf("%w: chunk extension value", errMalformed)
			}
			i = j
		}
	}
	return n, nil
}

func skipBWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

func skipToken(b []byte, i int) int {
	for i < len(b) && isTokenChar(b[i]) {
		i++
	}
	return i
}

// skipQuoted returns the index after the quoted-string starting at b[i] == '"'
// (RFC 9110 §5.6.4).
func skipQuoted(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 == len(b) || !isQuotedChar(b[i+1]) {
				return 0, false
			}
			i++
		case !isQuotedChar(c):
			return 0, false
		}
	}
	return 0, false
}

// isQuotedChar: HTAB, SP, VCHAR and obs-text.
func isQuotedChar(c byte) bool { return c == '\t' || (c >= ' ' && c != 0x7f) }
