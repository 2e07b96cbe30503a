package httpproxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/httpproxy"
)

// The keep-alive deadlines, which the proxy moves coarsely (IdleTimeoutSlackDivisor):
// an idle connection whose deadline was kept from an earlier answer closes no
// earlier than IdleTimeout after its last answer and no later than the slack after;
// a later request whose head arrives in parts still gets ReadHeaderTimeout; a
// request body is read without the idle deadline.
func TestHTTP1KeepAliveDeadlines(t *testing.T) {
	const hdr, idle = 300 * time.Millisecond, 800 * time.Millisecond
	const slack = idle / httpproxy.IdleTimeoutSlackDivisor
	a := startApp(t, echo)
	ln := listen(t)
	s := startSidecar(t, ln, dt.Simple("outbound", addrOf(ln), false, a.ap()), sidecarOpts{proxy: func(c *httpproxy.Config) {
		c.ReadHeaderTimeout, c.IdleTimeout = hdr, idle
	}})
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", s.Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, req string) {
		t.Helper()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	closedAfter := func(br *bufio.Reader) time.Duration {
		start := time.Now()
		_, _ = io.Copy(io.Discard, br)
		return time.Since(start)
	}

	// Idle: the second answer comes well within the slack of the first, so the
	// first's deadline is kept; it still fires within [idle, idle+slack] of the
	// second (the upper bound allows for a loaded machine's scheduling).
	c, br := dial()
	get(c, br, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	get(c, br, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	if d := closedAfter(br); d < idle-20*time.Millisecond || d > idle+slack+500*time.Millisecond {
		t.Errorf("idle keep-alive connection closed %s after its last answer, want within [%s, %s]", d, idle, idle+slack)
	}

	// A second request's head in parts: ReadHeaderTimeout from its first byte, not
	// the idle deadline.
	c, br = dial()
	get(c, br, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: sv")
	if d := closedAfter(br); d < hdr-50*time.Millisecond || d >= idle {
		t.Errorf("partial second head: closed after %s, want about %s", d, hdr)
	}

	// A body that arrives after the idle timeout (and its slack) has passed since
	// the last answer: read without a deadline, answered.
	c, br = dial()
	get(c, br, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: svc\r\nContent-Length: 4\r\n\r\n")
	time.Sleep(idle + slack + 200*time.Millisecond) // not a wait: the pause under test
	get(c, br, "body")
}
