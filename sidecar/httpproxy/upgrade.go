package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
)

// DefaultUpgradeIdleTimeout is Config.UpgradeIdleTimeout's default: an upgraded
// (WebSocket) connection silent both ways this long is closed. Route timeouts bound
// the exchange up to the 101, never the upgraded connection's life.
const DefaultUpgradeIdleTimeout = 5 * time.Minute

// asksUpgrade reports a protocol switch the proxy forwards (RFC 9110 §7.8): an
// HTTP/1.1 request with Upgrade named in Connection and no body. Anything else keeps
// Upgrade a hop-by-hop header, dropped. HTTP/2 Extended CONNECT (RFC 8441) is not
// supported, so an upgrade cannot go to an HTTP/2-only cluster.
func (m *msg) asksUpgrade() bool {
	if !m.upgrade || m.http10 || m.chunked || m.contentLength > 0 {
		return false
	}
	for _, s := range m.conn {
		if equalFoldLower(m.buf[s.s:s.e], "upgrade") {
			return true
		}
	}
	return false
}

// switchProtocols forwards the upstream's 101 in st.resp and then copies bytes both
// ways until either side ends or the connection is idle for UpgradeIdleTimeout. The
// upstream connection is closed after, never pooled; so is the client's.
func (p *Proxy) switchProtocols(ctx context.Context, cbr *bufio.Reader, cbw *bufio.Writer, uc *cluster.Conn, st *h1state) outcome {
	resp := &st.resp
	st.req.close = true
	resp.chunked, resp.contentLength = false, -1 // a 101 has no content
	cbw.WriteString("HTTP/1.1")
	cbw.Write(resp.buf[8:resp.start])
	cbw.WriteString("\r\n")
	resp.writeFieldsKeep(cbw, true)
	cbw.WriteString("\r\n")
	if err := cbw.Flush(); err != nil {
		uc.Close()
		return done
	}
	p.splice(ctx, st.conn, cbr, uc.Conn, uc.R)
	uc.Close()
	return done
}

// splice copies client⇄upstream, bytes already buffered on either side first. A
// clean end of one direction half-closes the other side's write end (so close
// handshakes finish); an error, the idle timeout or ctx ending stops both.
func (p *Proxy) splice(ctx context.Context, client net.Conn, cbr *bufio.Reader, up net.Conn, ubr *bufio.Reader) {
	_ = client.SetDeadline(time.Time{})
	_ = up.SetDeadline(time.Time{})
	s := &spliceState{idle: p.cfg.UpgradeIdleTimeout, ctx: ctx}
	s.last.Store(time.Now().UnixNano())
	abort := func() {
		s.stopped.Store(true) // before the deadlines: a woken reader must see it
		past := time.Unix(1, 0)
		_ = client.SetDeadline(past)
		_ = up.SetDeadline(past)
	}
	stop := context.AfterFunc(ctx, abort)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.direction(client, ubr, up, abort)
	}()
	s.direction(up, cbr, client, abort)
	<-done
}

type spliceState struct {
	idle    time.Duration
	ctx     context.Context
	last    atomic.Int64 // unix ns of the last byte copied either way
	stopped atomic.Bool  // set by abort: both directions end
}

// direction copies src (read through its buffer) to dst until src ends.
func (s *spliceState) direction(dst net.Conn, src *bufio.Reader, srcConn net.Conn, abort func()) {
	for {
		if src.Buffered() == 0 {
			// The idle clock is shared: a direction silent while the other is busy
			// is not idle.
			_ = srcConn.SetReadDeadline(time.Unix(0, s.last.Load()).Add(s.idle))
			if s.ctx.Err() != nil || s.stopped.Load() {
				abort()
				return
			}
			if _, err := src.Peek(1); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && s.ctx.Err() == nil && !s.stopped.Load() &&
					time.Since(time.Unix(0, s.last.Load())) < s.idle {
					continue
				}
				if err == io.EOF {
					if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
						return // half-close; the other direction goes on
					}
				}
				abort()
				return
			}
		}
		b, _ := src.Peek(src.Buffered())
		_ = dst.SetWriteDeadline(time.Now().Add(s.idle))
		if _, err := dst.Write(b); err != nil {
			abort()
			return
		}
		_, _ = src.Discard(len(b))
		s.last.Store(time.Now().UnixNano())
	}
}
