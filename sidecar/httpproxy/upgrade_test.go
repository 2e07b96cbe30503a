package httpproxy_test

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
)

// WebSocket framing by hand (RFC 6455): enough for text frames and close.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsFrame is one final frame; a client's is masked with mask.
func wsFrame(op byte, payload []byte, mask []byte) []byte {
	b := []byte{0x80 | op}
	n := len(payload)
	m := byte(0)
	if mask != nil {
		m = 0x80
	}
	switch {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask == nil {
		return append(b, payload...)
	}
	b = append(b, mask...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// readWSFrame reads one frame and unmasks it.
func readWSFrame(r *bufio.Reader) (op byte, payload []byte, masked bool, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	op, masked = h[0]&0x0f, h[1]&0x80 != 0
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err = io.ReadFull(r, l[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err = io.ReadFull(r, l[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	var mask [4]byte
	if masked {
		if _, err = io.ReadFull(r, mask[:]); err != nil {
			return
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return
}

// wsEcho is a WebSocket echo upstream (anything but an upgrade gets okFor): it
// checks the handshake it received, answers 101, and echoes every data frame
// unmasked; a close frame is echoed and ends the connection.
func wsEcho(t *testing.T) *scripted {
	return serveScripted(t, func(up *scripted, id int64, c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			up.record(id, r, "")
			if r.Header.Get("Upgrade") != "websocket" {
				io.WriteString(c, okFor(r))
				continue
			}
			if r.RequestURI == "/refuse" {
				io.WriteString(c, "HTTP/1.1 426 Upgrade Required\r\nContent-Length: 2\r\n\r\nno")
				continue
			}
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
				"Sec-WebSocket-Accept: "+wsAccept(r.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n")
			for {
				op, payload, masked, err := readWSFrame(br)
				if err != nil || !masked {
					return // RFC 6455 §5.1: a server closes on an unmasked client frame
				}
				if _, err := c.Write(wsFrame(op, payload, nil)); err != nil || op == 0x8 {
					return
				}
			}
		}
	})
}

const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

func wsHandshake(uri string) string {
	return "GET " + uri + " HTTP/1.1\r\nHost: svc\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n" +
		"Sec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
}

var wsMask = []byte{0x37, 0xfa, 0x21, 0x3d}

func (rc *rawClient) wsEchoes(msg string) {
	rc.t.Helper()
	rc.send(string(wsFrame(0x1, []byte(msg), wsMask)))
	rc.wsExpect(msg)
}

func (rc *rawClient) wsExpect(msg string) {
	rc.t.Helper()
	op, payload, masked, err := readWSFrame(rc.br)
	if err != nil || op != 0x1 || masked || string(payload) != msg {
		rc.t.Fatalf("echo frame: op %d masked %v %q (%v), want text %q", op, masked, payload, err, msg)
	}
}

// TestWebSocketThroughSidecar (finding 7): the handshake goes upstream with its
// upgrade headers, the 101 comes back, frames flow both ways (including one sent
// together with the handshake), the route timeout does not cut the live
// connection, and a close handshake ends it. The upstream connection is never
// pooled: the next request, on another client connection, gets a new one.
func TestWebSocketThroughSidecar(t *testing.T) {
	up := wsEcho(t)
	ln := listen(t)
	const routeTimeout = 100 * time.Millisecond
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "backend", routeTimeout),
		map[string][]netip.AddrPort{"backend": {up.addr}}), sidecarOpts{})

	a := dialRaw(t, s)
	a.send(wsHandshake("/chat") + string(wsFrame(0x1, []byte("early"), wsMask)))
	resp, err := http.ReadResponse(a.br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" ||
		!strings.EqualFold(resp.Header.Get("Connection"), "upgrade") || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(wsKey) {
		t.Fatalf("handshake answer %d %v", resp.StatusCode, resp.Header)
	}
	a.wsExpect("early")
	// Keep it busy for several route timeouts: the timeout ends at the 101.
	start := time.Now()
	for i := 0; time.Since(start) < 4*routeTimeout; i++ {
		a.wsEchoes(strings.Repeat("x", i*97%70000))
		time.Sleep(routeTimeout / 4) // not a wait for a condition: spreads the frames past the route timeout
	}
	a.send(string(wsFrame(0x8, []byte{0x03, 0xe8}, wsMask)))
	if op, _, _, err := readWSFrame(a.br); err != nil || op != 0x8 {
		t.Fatalf("close frame: op %d, %v", op, err)
	}
	a.expectClosed()

	got := up.requests()
	if len(got) != 1 {
		t.Fatalf("upstream got %d requests, want the handshake", len(got))
	}
	h := got[0].header
	if h.Get("Upgrade") != "websocket" || !strings.EqualFold(h.Get("Connection"), "upgrade") ||
		h.Get("Sec-Websocket-Key") != wsKey || h.Get("Sec-Websocket-Version") != "13" {
		t.Errorf("upstream got handshake headers %v", h)
	}
	b := dialRaw(t, s)
	b.send(getReq("/after"))
	b.expectOK("/after")
	got = checkUpstreamGot(t, up, "GET /chat", "GET /after")
	if got[1].conn == got[0].conn {
		t.Error("the upgraded upstream connection carried another request")
	}
}

// TestWebSocketIdleTimeout: an upgraded connection silent both ways is closed at
// UpgradeIdleTimeout, not before (a pause just under it, longer than the route
// timeout, is survived) and not much after.
func TestWebSocketIdleTimeout(t *testing.T) {
	up := wsEcho(t)
	ln := listen(t)
	const idle = 400 * time.Millisecond
	s := startSidecar(t, ln, oneRoute(addrOf(ln), dt.PrefixRoute("/", "backend", 50*time.Millisecond),
		map[string][]netip.AddrPort{"backend": {up.addr}}), sidecarOpts{upgradeIdle: idle})
	a := dialRaw(t, s)
	a.send(wsHandshake("/idle"))
	if resp, _ := a.read("GET"); resp.StatusCode != 101 {
		t.Fatalf("handshake answer %d", resp.StatusCode)
	}
	a.wsEchoes("one")
	time.Sleep(idle * 3 / 4) // not a wait for a condition: silence just under the bound, past the route timeout
	// Measured from before "two" is sent: the sidecar's idle clock starts when it
	// has copied the echo's last byte, which is after that but may be before this
	// side has read the echo (seen: closed 398.8ms after the client read it).
	last := time.Now()
	a.wsEchoes("two")
	a.expectClosed() // silent past the bound
	if d := time.Since(last); d < idle || d > idle+2*time.Second {
		t.Errorf("idle upgraded connection closed after %v, want %v (and not much more)", d, idle)
	}
}

// TestUpgradeNotTaken: an upstream that declines the upgrade answers normally and
// keeps its connection; Upgrade without "Connection: upgrade", or on HTTP/1.0, is
// a hop-by-hop header dropped, not a switch; a 101 to such a request is a 502.
func TestUpgradeNotTaken(t *testing.T) {
	up := wsEcho(t)
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, up.addr), sidecarOpts{})
	a := dialRaw(t, s)
	a.send(wsHandshake("/refuse") + getReq("/2"))
	resp, body := a.read("GET")
	if resp.StatusCode != 426 || body != "no" {
		t.Fatalf("declined upgrade: %d %q, want the upstream's 426", resp.StatusCode, body)
	}
	a.expectOK("/2")
	a.send("GET /noconn HTTP/1.1\r\nHost: svc\r\nUpgrade: websocket\r\n\r\n")
	a.expectOK("/noconn")
	c := dialRaw(t, s)
	c.send("GET /old HTTP/1.0\r\nHost: svc\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n")
	c.expectOK("/old")
	got := checkUpstreamGot(t, up, "GET /refuse", "GET /2", "GET /noconn", "GET /old")
	for _, r := range got[2:] {
		if r.header.Get("Upgrade") != "" {
			t.Errorf("%s: Upgrade forwarded without an upgrade being asked: %v", r.uri, r.header)
		}
	}
	if got[1].conn != got[0].conn {
		t.Error("a declined upgrade cost the upstream connection")
	}
}

// TestWebSocketThroughTwoSidecars: outbound sidecar → peer sidecar's inbound
// listener → app. Peer hops are HTTP/2, which has no upgrade without Extended
// CONNECT, so the upgrade goes to the peer over HTTP/1.1 (its listener speaks both)
// and is spliced at both hops; ordinary requests still take HTTP/2.
func TestWebSocketThroughTwoSidecars(t *testing.T) {
	up := wsEcho(t)
	m := startPeerMesh(t, up.addr, peerOpts{timeout: 100 * time.Millisecond})
	a := dialRaw(t, m.out)
	a.send(wsHandshake("/chat"))
	resp, err := http.ReadResponse(a.br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(wsKey) {
		t.Fatalf("handshake answer %d %v", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"one", strings.Repeat("y", 70000), "three"} {
		a.wsEchoes(msg)
	}
	a.send(string(wsFrame(0x8, []byte{0x03, 0xe8}, wsMask)))
	if op, _, _, err := readWSFrame(a.br); err != nil || op != 0x8 {
		t.Fatalf("close frame: op %d, %v", op, err)
	}
	a.expectClosed()
	b := dialRaw(t, m.out)
	b.send(getReq("/after"))
	b.expectOK("/after")
	if _, h2 := m.inbound.conns(); h2 != 1 {
		t.Errorf("peer saw %d HTTP/2 connections, want 1 (the ordinary request)", h2)
	}
	checkUpstreamGot(t, up, "GET /chat", "GET /after")
}
