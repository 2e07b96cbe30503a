package h2server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/sidecar/h2flow"
)

// clientPreface is what a client sends first (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

var (
	errStreamClosed = errors.New("h2server: stream closed")
	errConnClosed   = errors.New("h2server: connection closed")
	errBodyClosed   = errors.New("h2server: request body closed")
)

// conn is one client connection. The goroutine in serve (the reader) owns the
// Framer's reading side and the reader-owned fields; writes go through wmu.
// Lock order: wmu before mu, never mu then wmu.
type conn struct {
	srv        *Server
	nc         net.Conn
	br         *bufio.Reader
	fr         *http2.Framer
	ctx        context.Context
	cancel     context.CancelFunc
	remoteAddr string
	done       chan struct{} // closed when serve has returned
	handlers   sync.WaitGroup

	// Reader-owned.
	sawSettings bool
	canon       map[string]string // lower-case field name → canonical key, bounded

	wmu     sync.Mutex // guards the Framer's writing side, bw, henc, hbuf, wErr, pending, lower
	bw      *bufio.Writer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	wErr    error // the first write error: later writes fail at once
	pending bool  // bw holds frames nobody has promised to flush
	lower   map[string]string

	mu              sync.Mutex // guards the fields below and every stream's shared fields
	winCond         sync.Cond  // on mu: a send window grew, or a stream or the connection ended
	streams         map[uint32]*stream
	maxID           uint32        // highest client stream id seen
	sendWin         int64         // connection send window
	initSendWin     int64         // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame    int           // the client's SETTINGS_MAX_FRAME_SIZE
	inflow          h2flow.Inflow // connection receive window
	streamCommitted int64         // Σ stream.committed
	committed       int64         // this connection's share of Server.committed
	unackedSettings int
	goAway          bool // a GOAWAY went out: no new streams
	closing         bool // the connection is ending: writes fail
	opened          uint64
	idleSeen        uint64 // opened at the last idle tick
	// recentResets are the last streams this server reset: frames the client
	// had in flight for them are ignored (RFC 9113 §5.4.2), as x/net/http2
	// ignores them while its RST_STREAM is queued.
	recentResets [MaxRecentResets]uint32
	nextReset    int
	idleTimer    *time.Timer
}

func newConn(s *Server, ctx context.Context, nc net.Conn, br *bufio.Reader) *conn {
	c := &conn{srv: s, nc: nc, br: br, done: make(chan struct{}), streams: map[uint32]*stream{},
		sendWin: initialWindow, initSendWin: initialWindow, peerMaxFrame: 16 << 10}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if a := nc.RemoteAddr(); a != nil {
		c.remoteAddr = a.String()
	}
	c.winCond.L = &c.mu
	c.bw = bufio.NewWriterSize(nc, 16<<10+64)
	c.fr = http2.NewFramer(c.bw, br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(uint32(s.cfg.MaxReadFrameSize))
	c.fr.MaxHeaderListSize = uint32(s.cfg.MaxHeaderListSize)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.inflow.Init(int32(s.cfg.ConnWindow))
	return c
}

// serve runs the connection: the server preface, then the frame loop.
func (c *conn) serve() {
	defer close(c.done)
	defer c.handlers.Wait()
	defer c.teardown()
	cfg := &c.srv.cfg
	c.wmu.Lock()
	c.unackedSettings++ // before the client can answer it
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: uint32(cfg.MaxReadFrameSize)},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(cfg.MaxConcurrentStreams)},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(cfg.MaxHeaderListSize)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.StreamWindow)},
	)
	if d := cfg.ConnWindow - initialWindow; d > 0 {
		_ = c.fr.WriteWindowUpdate(0, uint32(d))
	}
	err := c.bw.Flush()
	c.wmu.Unlock()
	if err != nil {
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(FirstSettingsTimeout))
	var pre [len(clientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil || string(pre[:]) != clientPreface {
		return
	}
	if cfg.IdleTimeout > 0 {
		c.mu.Lock()
		c.idleTimer = time.AfterFunc(cfg.IdleTimeout, c.onIdle)
		c.mu.Unlock()
	}
	for {
		if c.br.Buffered() == 0 {
			c.flushPending() // about to wait for the client: send what is owed
		}
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.process(f)
		} else if f != nil {
			// A header block that failed after its stream id was read: the
			// GOAWAY covers that id (as x/net/http2's does).
			c.mu.Lock()
			if id := f.Header().StreamID; id > c.maxID && id%2 == 1 {
				c.maxID = id
			}
			c.mu.Unlock()
		}
		if err == nil {
			continue
		}
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &se):
			c.resetStream(se.StreamID, se.Code)
		case err == http2.ErrFrameTooLarge:
			c.goAwayAndDrain(http2.ErrCodeFrameSize)
			return
		case errors.As(err, &ce):
			c.srv.logf("h2server: connection error from %s: %v (%v)", c.remoteAddr, http2.ErrCode(ce), c.fr.ErrorDetail())
			c.goAwayAndDrain(http2.ErrCode(ce))
			return
		default:
			return // the client went away, or a deadline (idle, drain) passed
		}
	}
}

// teardown ends every stream and closes the connection.
func (c *conn) teardown() {
	c.mu.Lock()
	c.closing = true
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	for id, st := range c.streams {
		st.endLocked(errConnClosed)
		delete(c.streams, id)
		st.committed = 0
	}
	c.streamCommitted = 0 // what is unread goes when the handlers do
	c.syncCommittedLocked()
	c.winCond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	c.wmu.Lock()
	if c.wErr == nil && c.pending {
		c.wErr = c.bw.Flush()
	}
	if c.wErr == nil {
		c.wErr = errConnClosed
	}
	c.wmu.Unlock()
	_ = c.nc.Close()
}

// abort closes the connection now (Server.Close): the reader's read fails.
func (c *conn) abort() {
	c.mu.Lock()
	c.closing = true
	c.winCond.Broadcast()
	c.mu.Unlock()
	_ = c.nc.Close()
}

// goAwayAndDrain sends GOAWAY with code (a connection error) and waits, at most
// GoAwayTimeout, for the client to close, discarding what it sends.
func (c *conn) goAwayAndDrain(code http2.ErrCode) {
	c.wmu.Lock()
	c.mu.Lock()
	c.goAway, c.closing = true, true
	last := c.maxID
	c.winCond.Broadcast()
	c.mu.Unlock()
	if c.wErr == nil {
		_ = c.fr.WriteGoAway(last, code, nil)
		c.wErr = c.bw.Flush()
		c.pending = false
	}
	c.wmu.Unlock()
	c.cancel()
	c.drain()
}

// drain half-closes the connection and reads until the client closes, at most
// GoAwayTimeout.
func (c *conn) drain() {
	c.wmu.Lock() // no write in flight when the write side closes, and none after
	if c.wErr == nil && c.pending {
		_ = c.bw.Flush()
	}
	c.wErr, c.pending = errConnClosed, false
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	c.wmu.Unlock()
	_ = c.nc.SetReadDeadline(time.Now().Add(GoAwayTimeout))
	_, _ = io.Copy(io.Discard, c.br)
}

// startGracefulShutdown sends GOAWAY(NO_ERROR) naming the last stream taken;
// the connection closes once those streams are done.
func (c *conn) startGracefulShutdown() {
	c.wmu.Lock()
	c.mu.Lock()
	if c.goAway {
		c.mu.Unlock()
		c.wmu.Unlock()
		return
	}
	c.goAway = true
	last, idle := c.maxID, len(c.streams) == 0
	c.mu.Unlock()
	if c.wErr == nil {
		_ = c.fr.WriteGoAway(last, http2.ErrCodeNo, nil)
		c.wErr = c.bw.Flush()
		c.pending = false
	}
	c.wmu.Unlock()
	if idle {
		c.finishGraceful()
	}
}

// finishGraceful ends the connection GoAwayTimeout from now (or when the
// client closes it first): the GOAWAY has gone out and no stream is left. Until
// then frames are still processed (PINGs answered, as x/net/http2 does), and
// new streams are not taken.
func (c *conn) finishGraceful() {
	_ = c.nc.SetReadDeadline(time.Now().Add(GoAwayTimeout))
}

// onIdle closes a connection that opened no stream since the last tick and has none.
func (c *conn) onIdle() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	idle := len(c.streams) == 0 && c.opened == c.idleSeen
	c.idleSeen = c.opened
	if !idle {
		c.idleTimer.Reset(c.srv.cfg.IdleTimeout)
	}
	c.mu.Unlock()
	if idle {
		c.startGracefulShutdown()
	}
}

// flushPending flushes frames the reader wrote without flushing.
func (c *conn) flushPending() {
	c.wmu.Lock()
	if c.pending && c.wErr == nil {
		c.wErr = c.bw.Flush()
	}
	c.pending = false
	c.wmu.Unlock()
}

// writeControl writes one frame of the reader's (or a body read's) under wmu;
// it goes out with the next flush (the reader flushes before it waits).
func (c *conn) writeControl(flush bool, write func(fr *http2.Framer) error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wErr != nil {
		return
	}
	if err := write(c.fr); err != nil {
		c.wErr = err
		return
	}
	if flush {
		c.wErr = c.bw.Flush()
		c.pending = false
	} else {
		c.pending = true
	}
}

// state is the stream's state as RFC 9113 §5.1 names it, for frames on id.
type streamState int

const (
	stateIdle streamState = iota
	stateOpen
	stateHalfClosedRemote
	stateClosed
)

func (c *conn) stateLocked(id uint32) (streamState, *stream) {
	if st := c.streams[id]; st != nil {
		if st.remoteDone {
			return stateHalfClosedRemote, st
		}
		return stateOpen, st
	}
	if id%2 == 1 && id <= c.maxID {
		return stateClosed, nil
	}
	return stateIdle, nil
}

// process handles one frame; an http2.StreamError or http2.ConnectionError it
// returns is answered by serve.
func (c *conn) process(f http2.Frame) error {
	if !c.sawSettings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
		// Clear the first-SETTINGS deadline, unless a GOAWAY went out meanwhile:
		// then its deadline (finishGraceful, set after goAway under c.mu) is
		// the one that must close the connection.
		c.mu.Lock()
		if !c.goAway {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	// After GOAWAY, frames of streams it did not take are dropped (their DATA's
	// connection credit returned): RFC 9113 §6.8.
	if c.goAway && f.Header().StreamID > c.maxID {
		c.mu.Unlock()
		if df, ok := f.(*http2.DataFrame); ok {
			return c.discardData(df)
		}
		return nil
	}
	c.mu.Unlock()
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil // this server sends no PING
		}
		data := f.Data
		c.writeControl(false, func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		return nil
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		state, st := c.stateLocked(f.StreamID)
		if state == stateIdle {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if st != nil {
			c.closeStreamLocked(st, errStreamReset(f.ErrCode))
		}
		c.mu.Unlock()
		return nil
	case *http2.PriorityFrame:
		if f.StreamID == f.StreamDep {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		c.startGracefulShutdown()
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil // unknown and ignored types (PRIORITY_UPDATE, extensions)
}

func errStreamReset(code http2.ErrCode) error {
	return http2.StreamError{Code: code, Cause: errors.New("h2server: stream reset by client: " + code.String())}
}

func (c *conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.mu.Lock()
		c.unackedSettings--
		bad := c.unackedSettings < 0
		c.mu.Unlock()
		if bad {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	if f.NumSettings() > MaxSettingsPerFrame || f.HasDuplicates() {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	tableSize, hasTable := uint32(0), false
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			tableSize, hasTable = s.Val, true
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			defer c.mu.Unlock()
			delta := int64(s.Val) - c.initSendWin
			for _, st := range c.streams {
				if st.sendWin+delta > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.initSendWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
			}
			c.winCond.Broadcast()
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerMaxFrame = int(s.Val)
			c.mu.Unlock()
		case http2.SettingNoRFC7540Priorities:
			if s.Val > 1 {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.writeControl(false, func(fr *http2.Framer) error {
		if hasTable {
			c.henc.SetMaxDynamicTableSize(tableSize) // bounded by the encoder's 4096
		}
		return fr.WriteSettingsAck()
	})
	return nil
}

func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if c.sendWin+int64(f.Increment) > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWin += int64(f.Increment)
		c.winCond.Broadcast()
		return nil
	}
	state, st := c.stateLocked(f.StreamID)
	if state == stateIdle {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st == nil {
		return nil // closed: a late update is allowed (RFC 9113 §5.1)
	}
	if st.sendWin+int64(f.Increment) > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.sendWin += int64(f.Increment)
	c.winCond.Broadcast()
	return nil
}

// discardData takes a dropped DATA frame's length from the connection window
// and gives it back at once.
func (c *conn) discardData(f *http2.DataFrame) error {
	c.mu.Lock()
	if !c.inflow.Take(f.Length) {
		c.mu.Unlock()
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	upd := c.inflow.Add(int(f.Length))
	c.mu.Unlock()
	c.sendWindowUpdates(0, 0, upd, false)
	return nil
}

func (c *conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	c.mu.Lock()
	state, st := c.stateLocked(id)
	if state == stateIdle {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st == nil || state != stateOpen || st.gotTrailers {
		reset := st == nil && c.recentlyResetLocked(id)
		c.mu.Unlock()
		if err := c.discardData(f); err != nil || reset {
			return err // reset: in flight when this server reset the stream
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	data := f.Data()
	if st.declLen >= 0 && st.gotLen+int64(len(data)) > st.declLen {
		c.mu.Unlock()
		if err := c.discardData(f); err != nil {
			return err
		}
		c.mu.Lock()
		st.endBodyLocked(errors.New("h2server: request body longer than its content-length"))
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	var connUpd, streamUpd int32
	if f.Length > 0 {
		if f.Length > uint32(c.inflow.Avail) || f.Length > uint32(st.inflow.Avail) {
			c.mu.Unlock()
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
		}
		c.inflow.Avail -= int32(f.Length)
		st.inflow.Avail -= int32(f.Length)
		st.gotLen += int64(len(data))
		if st.bodyClosed {
			// The handler stopped reading: the connection's credit comes back now.
			connUpd = c.inflow.Add(len(data))
		} else if len(data) > 0 {
			st.body = append(st.body, data...)
			st.bodyCond.Signal()
		}
		// Padding is never read: its credit comes back now.
		if pad := int(f.Length) - len(data); pad > 0 {
			connUpd += c.inflow.Add(pad)
			streamUpd = st.inflow.Add(pad)
		}
	}
	if f.StreamEnded() {
		c.endRemoteLocked(st)
	}
	c.recommitLocked(st)
	c.mu.Unlock()
	if connUpd > 0 || streamUpd > 0 {
		c.sendWindowUpdates(id, streamUpd, connUpd, false)
	}
	if f.StreamEnded() && st.declLen >= 0 && st.gotLen != st.declLen {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	return nil
}

// endRemoteLocked is END_STREAM from the client: the body ends (with an error
// when it is shorter than its content-length; the caller resets the stream).
func (c *conn) endRemoteLocked(st *stream) {
	st.remoteDone = true
	defer c.recommitLocked(st)
	if st.declLen >= 0 && st.gotLen != st.declLen {
		st.endBodyLocked(errors.New("h2server: request body shorter than its content-length"))
	} else {
		st.endBodyLocked(io.EOF)
	}
	if st.localDone {
		c.removeStreamLocked(st)
	}
}

// sendWindowUpdates returns credit for stream id (when streamUpd > 0) and the
// connection.
func (c *conn) sendWindowUpdates(id uint32, streamUpd, connUpd int32, flush bool) {
	c.writeControl(flush, func(fr *http2.Framer) error {
		if connUpd > 0 {
			if err := fr.WriteWindowUpdate(0, uint32(connUpd)); err != nil {
				return err
			}
		}
		if streamUpd > 0 {
			return fr.WriteWindowUpdate(id, uint32(streamUpd))
		}
		return nil
	})
}

// noteResetLocked remembers that this server reset stream id.
func (c *conn) noteResetLocked(id uint32) {
	if c.srv.cfg.forgetResets {
		return
	}
	c.recentResets[c.nextReset] = id
	c.nextReset = (c.nextReset + 1) % MaxRecentResets
}

func (c *conn) recentlyResetLocked(id uint32) bool {
	for _, r := range c.recentResets {
		if r == id && id != 0 {
			return true
		}
	}
	return false
}

// resetStream sends RST_STREAM for id and ends the stream if it is open.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.wmu.Lock()
	c.mu.Lock()
	st := c.streams[id]
	if st != nil {
		c.noteResetLocked(id)
		if st.resetSent {
			c.mu.Unlock()
			c.wmu.Unlock()
			return
		}
		st.resetSent = true
		c.closeStreamLocked(st, http2.StreamError{StreamID: id, Code: code})
	}
	c.mu.Unlock()
	if c.wErr == nil {
		if err := c.fr.WriteRSTStream(id, code); err != nil {
			c.wErr = err
		}
		c.pending = true
	}
	c.wmu.Unlock()
}

// closeStreamLocked ends st now (reset either way, or the connection ended):
// its handler's context ends, its body and writes fail.
func (c *conn) closeStreamLocked(st *stream, err error) {
	st.endLocked(err)
	c.removeStreamLocked(st)
}

// removeStreamLocked forgets st: both sides are done, or it was reset.
func (c *conn) removeStreamLocked(st *stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	c.streamCommitted -= st.committed
	st.committed = 0
	c.syncCommittedLocked()
	c.winCond.Broadcast()
	if len(c.streams) == 0 && c.goAway && !c.closing {
		c.finishGraceful() // goAway is set under wmu after its GOAWAY was written
	}
}

// processHeaders opens a stream or takes a stream's trailers.
func (c *conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		defer c.mu.Unlock()
		if st.resetSent {
			return nil
		}
		if st.remoteDone {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		return c.trailersLocked(st, f)
	}
	if c.recentlyResetLocked(id) {
		c.mu.Unlock()
		return nil // in flight when this server reset the stream
	}
	if id <= c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxID = id
	if len(c.streams)+1 > c.srv.cfg.MaxConcurrentStreams {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.noteResetLocked(id)
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	c.mu.Unlock()
	st := &stream{c: c, id: id, declLen: -1}
	req, handler, err := c.newRequest(st, f)
	if err != nil {
		c.mu.Lock()
		c.noteResetLocked(id) // the stream existed, if only to be reset
		c.mu.Unlock()
		return err
	}
	st.req = req
	st.handler = handler
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	st.sendWin = c.initSendWin
	st.inflow.Init(int32(c.srv.cfg.StreamWindow))
	st.bodyCond.L = &c.mu
	c.streams[id] = st
	c.opened++
	if f.StreamEnded() {
		st.remoteDone = true
		st.bodyErr = io.EOF
	}
	c.recommitLocked(st)
	c.mu.Unlock()
	c.handlers.Add(1)
	c.srv.dispatch(st)
	return nil
}

func (c *conn) trailersLocked(st *stream, f *http2.MetaHeadersFrame) error {
	if st.gotTrailers {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st.gotTrailers = true
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	if st.trailer != nil {
		for _, hf := range f.RegularFields() {
			k := c.canonical(hf.Name)
			if !validTrailer(k) {
				return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
			}
			st.trailer[k] = append(st.trailer[k], hf.Value)
		}
	}
	c.endRemoteLocked(st)
	if st.declLen >= 0 && st.gotLen != st.declLen {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	return nil
}

// recommitLocked brings st's share of Server.BodyBytesCommitted, and its
// connection's, up to date after st's credit, body or state changed. A stream
// no longer in c.streams counts nothing (removeStreamLocked took its share out).
func (c *conn) recommitLocked(st *stream) {
	n := int64(0)
	if c.streams[st.id] == st {
		n = st.commitmentLocked()
	}
	c.streamCommitted += n - st.committed
	st.committed = n
	c.syncCommittedLocked()
}

// syncCommittedLocked moves the change of c's share into the server's total: at
// most ConnWindow, the credit the connection as a whole grants.
func (c *conn) syncCommittedLocked() {
	n := min(c.streamCommitted, int64(c.srv.cfg.ConnWindow))
	if d := n - c.committed; d != 0 {
		c.srv.committed.Add(d)
		if f := c.srv.cfg.Commit; f != nil {
			f(d)
		}
		c.committed = n
	}
}
