package httpproxy

import (
	"bufio"
	"bytes"
	"net"
	"time"
)

// IdleTimeoutSlackDivisor sets how late Config.IdleTimeout may fire: the idle
// deadline of a keep-alive connection is moved only when the one already set would
// fire outside [timeout, timeout+timeout/IdleTimeoutSlackDivisor] after the last
// answer, so a busy connection sets it about once per slack instead of once per
// request (each set is a runtime timer update: ~4% of the proxy's CPU at saturation).
const IdleTimeoutSlackDivisor = 8

// readDeadline tracks the read deadline set on a client connection.
type readDeadline struct {
	at    time.Time // what conn has; zero: none
	known bool      // at is current (false until the first set through it)
}

// set gives conn the read deadline at exactly.
func (d *readDeadline) set(conn net.Conn, at time.Time) {
	d.at, d.known = at, true
	_ = conn.SetReadDeadline(at)
}

// clear removes conn's read deadline unless it has none.
func (d *readDeadline) clear(conn net.Conn) {
	if !d.known || !d.at.IsZero() {
		d.set(conn, time.Time{})
	}
}

// idle makes conn's read deadline fire between timeout and timeout+slack after now
// (slack = timeout/IdleTimeoutSlackDivisor), keeping the one set when it does.
func (d *readDeadline) idle(conn net.Conn, now time.Time, timeout time.Duration) {
	earliest := now.Add(timeout)
	latest := earliest.Add(timeout / IdleTimeoutSlackDivisor)
	if d.known && !d.at.IsZero() && !d.at.Before(earliest) && !d.at.After(latest) {
		return
	}
	d.set(conn, latest)
}

// headBuffered reports whether br holds a whole request head already, so reading
// it needs no read from the connection (and no header deadline). It errs on "no":
// a head ended by bare LFs, or led by empty lines, is not recognized.
func headBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return len(b) > 0 && b[0] != '\r' && b[0] != '\n' && bytes.Contains(b, []byte("\r\n\r\n"))
}
