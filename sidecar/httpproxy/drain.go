package httpproxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// drainWatch ends an HTTP/1.1 connection's wait for its next request when its
// listener starts draining (Target.Drain ends), while a request in flight runs to
// its answer and the connection closes after it. A nil *drainWatch never drains.
type drainWatch struct {
	conn     net.Conn
	stop     func() bool
	mu       sync.Mutex // guards idle and draining, and orders the deadline with them
	idle     bool       // waiting for (or reading) a request head
	draining bool
}

// watchDrain starts watching drain for conn, which is idle (awaiting its first
// request). nil when drain is nil.
func watchDrain(conn net.Conn, drain context.Context) *drainWatch {
	if drain == nil {
		return nil
	}
	w := &drainWatch{conn: conn, idle: true}
	w.stop = context.AfterFunc(drain, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.draining = true
		if w.idle {
			_ = w.conn.SetReadDeadline(time.Now()) // wake the wait: nothing is in flight
		}
	})
	return w
}

// busy marks a request head as read; true when draining has begun (the request
// is still served, then the connection closes). It clears a deadline the drain
// may have set while the head was being read.
func (w *drainWatch) busy() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idle = false
	if w.draining {
		_ = w.conn.SetReadDeadline(time.Time{})
	}
	return w.draining
}

// idleAgain marks conn as waiting for its next request, for timeout after now
// (rd.idle: within its slack); false when draining has begun and the connection
// should close instead.
func (w *drainWatch) idleAgain(conn net.Conn, rd *readDeadline, now time.Time, timeout time.Duration) bool {
	if w == nil {
		rd.idle(conn, now, timeout)
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return false
	}
	w.idle = true
	rd.idle(conn, now, timeout)
	return true
}

// readDeadline sets conn's read deadline (through rd) for an idle wait, unless the
// drain has already cut that wait short (its earlier deadline stands; the
// connection closes after it, so rd is not consulted again).
func (w *drainWatch) readDeadline(conn net.Conn, rd *readDeadline, deadline time.Time) {
	if w == nil {
		rd.set(conn, deadline)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.draining {
		rd.set(conn, deadline)
	}
}

// close stops watching.
func (w *drainWatch) close() {
	if w != nil {
		w.stop()
	}
}
