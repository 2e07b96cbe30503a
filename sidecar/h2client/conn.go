// Package h2client is the sidecar's own HTTP/2 client connection, for the
// pooled peer hop (prior-knowledge h2c, or h2 inside the sidecars' mTLS) and
// HTTP/2 upstreams. Frames are read and written with golang.org/x/net/http2's
// Framer and HPACK with its hpack package: this package parses no frame and no
// header block itself.
//
// Why not net/http's HTTP/2 client (x/net/http2's Transport, bundled): every
// request there runs on a goroutine of its own besides the caller's and the
// connection's reader (RoundTrip → doRequest → reader → RoundTrip), with four
// channels and a timer per stream; on the sidecar pair that was a large share of
// the client sidecar's CPU per request. Here RoundTrip writes the request's
// HEADERS itself (one flush, one socket write for a request without a body),
// the reader hands the response to the waiting caller, and the caller reads the
// body from the stream's buffer. A request body is written by a goroutine of
// its own (full duplex: gRPC streams), only when there is a body.
//
// What it does: SETTINGS exchange and ACK, PING (answered; and a health check
// after PingTimeout of silence), GOAWAY (streams past its last id fail as not
// processed, ErrGoAway; the connection closes when the rest end), RST_STREAM
// both ways, SETTINGS_MAX_CONCURRENT_STREAMS with reservations (the pool's
// accounting), connection and stream flow control both ways, trailers both
// ways, header-list bounds both ways, HEAD, 1xx responses skipped (bounded).
// Not supported: server push (disabled in SETTINGS; a PUSH_PROMISE is a
// connection error), extended CONNECT, Expect: 100-continue waits, gzip.
//
// Each deliberate difference from net/http's client is listed in
// difffuzz_test.go, which compares the two on the same server byte streams.
package h2client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/weft-mesh/weft/sidecar/h2flow"
)

// Defaults and bounds of Config.
const (
	// DefaultMaxReadFrameSize is the SETTINGS_MAX_FRAME_SIZE advertised: the
	// largest frame the server may send.
	DefaultMaxReadFrameSize = 1 << 20
	MinMaxReadFrameSize     = 16 << 10
	MaxMaxReadFrameSize     = 1<<24 - 1
	// DefaultMaxHeaderListSize bounds a response's (and each 1xx's) header
	// list, RFC 9113 §6.5.2 units (net/http's MaxResponseHeaderBytes default).
	DefaultMaxHeaderListSize = 10 << 20
	MinMaxHeaderListSize     = 1 << 10
	MaxMaxHeaderListSize     = 1<<32 - 1
	// DefaultStreamWindow and DefaultConnWindow are the receive windows granted
	// (net/http's: a response body buffers at most StreamWindow bytes).
	DefaultStreamWindow = 4 << 20
	DefaultConnWindow   = 1 << 30
	MinWindow           = 64 << 10
	MaxWindow           = 1<<31 - 1
	// CloseFlushTimeout bounds how long closing waits for frames owed to a
	// server that has stopped reading.
	CloseFlushTimeout = time.Second
)

// Fixed protocol values.
const (
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// initialMaxStreams is assumed until the server's SETTINGS arrive, and
	// defaultMaxStreams when they name no SETTINGS_MAX_CONCURRENT_STREAMS
	// (net/http's values).
	initialMaxStreams = 100
	defaultMaxStreams = 1000
	initialWindow     = 65535
	maxWindow         = 1<<31 - 1
	// maxLowerCache bounds the per-connection cache of lower-cased field names.
	maxLowerCache = 256
	// writeBufferSize is the connection's write buffer: a frame of the
	// server's default 16 KiB maximum and its header fit.
	writeBufferSize = 16<<10 + 64
)

// Errors a RoundTrip can fail with before the server processed the request:
// sending it again elsewhere is safe (when its body can be replayed).
var (
	// ErrGoAway: the server's GOAWAY did not cover the stream.
	ErrGoAway = errors.New("h2client: the server's GOAWAY did not cover the stream (not processed)")
	// ErrUnusable: the connection was closed, or had a GOAWAY, before the
	// request went out.
	ErrUnusable = errors.New("h2client: connection not usable")
)

var (
	errClosed          = errors.New("h2client: connection closed")
	errAtLimit         = errors.New("h2client: connection at the server's SETTINGS_MAX_CONCURRENT_STREAMS")
	errLostPing        = errors.New("h2client: connection lost: PING unanswered")
	errIdle            = errors.New("h2client: connection closed after its idle timeout")
	errBodyClosed      = errors.New("h2client: response body closed")
	errFromPeer        = errors.New("h2client: stream reset by the server")
	errHeaderListSize  = errors.New("h2client: response header list larger than MaxHeaderListSize")
	errTooLong         = errors.New("h2client: server replied with more than its declared content-length")
	errReqBodyTooLong  = errors.New("h2client: request body longer than its content-length")
	errReqBodyTooShort = errors.New("h2client: request body shorter than its content-length")
	errPeerHeaderList  = errors.New("h2client: request header list larger than the server's SETTINGS_MAX_HEADER_LIST_SIZE")
)

// Config configures a connection. Zero values take the defaults.
type Config struct {
	// MaxReadFrameSize is SETTINGS_MAX_FRAME_SIZE. 0: DefaultMaxReadFrameSize.
	MaxReadFrameSize int
	// MaxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE. 0: DefaultMaxHeaderListSize.
	MaxHeaderListSize int
	// StreamWindow and ConnWindow are the receive windows. 0: the defaults.
	StreamWindow int
	ConnWindow   int
	// IdleTimeout closes a connection that had no stream for this long (it
	// closes between IdleTimeout and twice that). 0: never.
	IdleTimeout time.Duration
	// PingTimeout, when > 0, pings a connection silent for this long and
	// closes it when nothing arrives within as long again.
	PingTimeout time.Duration
}

func (cfg *Config) check() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxReadFrameSize, DefaultMaxReadFrameSize)
	def(&cfg.MaxHeaderListSize, DefaultMaxHeaderListSize)
	def(&cfg.StreamWindow, DefaultStreamWindow)
	def(&cfg.ConnWindow, DefaultConnWindow)
	switch {
	case cfg.MaxReadFrameSize < MinMaxReadFrameSize || cfg.MaxReadFrameSize > MaxMaxReadFrameSize:
		return fmt.Errorf("h2client: MaxReadFrameSize %d outside %d..%d", cfg.MaxReadFrameSize, MinMaxReadFrameSize, MaxMaxReadFrameSize)
	case cfg.MaxHeaderListSize < MinMaxHeaderListSize || cfg.MaxHeaderListSize > MaxMaxHeaderListSize:
		return fmt.Errorf("h2client: MaxHeaderListSize %d outside %d..%d", cfg.MaxHeaderListSize, MinMaxHeaderListSize, MaxMaxHeaderListSize)
	case cfg.StreamWindow < MinWindow || cfg.StreamWindow > MaxWindow:
		return fmt.Errorf("h2client: StreamWindow %d outside %d..%d", cfg.StreamWindow, MinWindow, MaxWindow)
	case cfg.ConnWindow < MinWindow || cfg.ConnWindow > MaxWindow:
		return fmt.Errorf("h2client: ConnWindow %d outside %d..%d", cfg.ConnWindow, MinWindow, MaxWindow)
	case cfg.IdleTimeout < 0:
		return fmt.Errorf("h2client: IdleTimeout must not be negative, got %v", cfg.IdleTimeout)
	case cfg.PingTimeout < 0:
		return fmt.Errorf("h2client: PingTimeout must not be negative, got %v", cfg.PingTimeout)
	}
	return nil
}

// Conn is one HTTP/2 client connection. Its reader goroutine owns the Framer's
// reading side; writes go through wmu. Lock order: wmu before mu.
type Conn struct {
	nc         net.Conn
	cfg        Config
	br         *bufio.Reader
	fr         *http2.Framer
	readerDone chan struct{}
	hook       atomic.Pointer[func()]
	framesRead atomic.Uint64 // for the PING health check

	// Reader-owned.
	canon       map[string]string // lower-case field name → canonical key, bounded
	gotSettings bool              // the server's first frame, its SETTINGS, was read

	wmu     sync.Mutex // guards the Framer's writing side, bw, henc, hbuf, wErr, pending, lower
	bw      *bufio.Writer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	wErr    error
	pending bool // bw holds frames nobody has promised to flush
	lower   map[string]string

	mu            sync.Mutex // guards the fields below and every stream's shared fields
	cond          sync.Cond  // on mu: a send window grew, a slot freed, a stream or the connection ended
	streams       map[uint32]*stream
	nextID        uint32
	reserved      int
	maxStreams    int
	seenSettings  bool
	wantAck       bool
	peerMaxFrame  int
	peerMaxHeader uint64
	initSendWin   int64
	sendWin       int64
	inflow        h2flow.Inflow
	goAway        bool
	goAwayLast    uint32
	closed        bool
	err           error // why it is unusable; set with closed
	opened        uint64
	idleSeen      uint64
	idleTimer     *time.Timer
	pingTimer     *time.Timer
	pingOut       bool
	pingSeen      uint64
}

// New starts an HTTP/2 connection on nc (already dialled, TLS done): it
// writes the preface and SETTINGS and starts the reader. The caller closes the
// Conn.
func New(nc net.Conn, cfg Config) (*Conn, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, cfg: cfg, readerDone: make(chan struct{}), streams: map[uint32]*stream{}, nextID: 1,
		maxStreams: initialMaxStreams, wantAck: true, peerMaxFrame: 16 << 10, peerMaxHeader: 1<<64 - 1,
		initSendWin: initialWindow, sendWin: initialWindow}
	c.cond.L = &c.mu
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.bw = bufio.NewWriterSize(nc, writeBufferSize)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(uint32(cfg.MaxReadFrameSize))
	c.fr.MaxHeaderListSize = uint32(cfg.MaxHeaderListSize)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.inflow.Init(int32(cfg.ConnWindow))
	c.bw.WriteString(clientPreface)
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.StreamWindow)},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: uint32(cfg.MaxReadFrameSize)},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(cfg.MaxHeaderListSize)},
	)
	if d := cfg.ConnWindow - initialWindow; d > 0 {
		_ = c.fr.WriteWindowUpdate(0, uint32(d))
	}
	if err := c.bw.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2client: write preface: %w", err)
	}
	c.mu.Lock()
	if cfg.IdleTimeout > 0 {
		c.idleTimer = time.AfterFunc(cfg.IdleTimeout, c.onIdle)
	}
	if cfg.PingTimeout > 0 {
		c.pingTimer = time.AfterFunc(cfg.PingTimeout, c.onPingTick)
	}
	c.mu.Unlock()
	go c.readLoop()
	return c, nil
}

// SetStateHook arranges for f to be called when a stream slot may have come
// free (a stream ended, a reservation was released, the server allowed more),
// or the connection became unusable; f is called at once too. It is called
// without locks held, from the reader, RoundTrip, or a body's Read or Close;
// calls may overlap.
func (c *Conn) SetStateHook(f func()) {
	c.hook.Store(&f)
	f()
}

func (c *Conn) stateChanged() {
	if f := c.hook.Load(); f != nil {
		(*f)()
	}
}

// Err is non-nil once the connection can no longer be used.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// InFlight counts open streams and reservations; 0 once closed.
func (c *Conn) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	return len(c.streams) + c.reserved
}

// Available counts the requests that may start now without waiting.
func (c *Conn) Available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goAway {
		return 0
	}
	return max(0, c.maxStreams-len(c.streams)-c.reserved)
}

// Reserve reserves a stream slot for one RoundTrip (or Release); it fails when
// the connection is closed, had a GOAWAY, or is at the server's limit.
func (c *Conn) Reserve() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goAway {
		return ErrUnusable
	}
	if len(c.streams)+c.reserved >= c.maxStreams {
		return errAtLimit
	}
	c.reserved++
	return nil
}

// Release gives back a slot reserved and not used.
func (c *Conn) Release() {
	c.mu.Lock()
	if c.reserved == 0 {
		c.mu.Unlock()
		return
	}
	c.reserved--
	c.cond.Broadcast()
	closeNow := c.goAway && len(c.streams) == 0 && c.reserved == 0 && !c.closed
	c.mu.Unlock()
	if closeNow {
		c.closeWith(errClosed)
	}
	c.stateChanged()
}

// Close closes the connection; requests in flight fail.
func (c *Conn) Close() error {
	c.closeWith(errClosed)
	return nil
}

// closeWith ends the connection with err (once): streams fail, the socket
// closes, the hook is told.
func (c *Conn) closeWith(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.err = true, err
	for id, st := range c.streams {
		st.abortLocked(err)
		delete(c.streams, id)
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if c.pingTimer != nil {
		c.pingTimer.Stop()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	// Frames owed (a SETTINGS or PING ACK, a RST_STREAM) go out first, within
	// CloseFlushTimeout; a writer blocked on the socket is cut instead.
	if c.wmu.TryLock() {
		if c.pending && c.wErr == nil {
			_ = c.nc.SetWriteDeadline(time.Now().Add(CloseFlushTimeout))
			_ = c.bw.Flush()
		}
		c.pending = false
		if c.wErr == nil {
			c.wErr = err
		}
		c.wmu.Unlock()
	}
	_ = c.nc.Close()
	c.stateChanged()
}

// readLoop reads and handles frames until the connection fails or closes.
func (c *Conn) readLoop() {
	defer close(c.readerDone)
	for {
		if c.br.Buffered() == 0 {
			c.flushPending() // about to wait for the server: send what is owed
		}
		f, err := c.fr.ReadFrame()
		if err == nil {
			c.framesRead.Add(1)
			err = c.process(f)
		}
		if err == nil {
			continue
		}
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &se):
			if se.Cause == nil {
				se.Cause = c.fr.ErrorDetail()
			}
			c.resetStream(se.StreamID, se.Code, se)
			continue
		case errors.As(err, &ce):
			c.writeControl(true, func(fr *http2.Framer) error { return fr.WriteGoAway(0, http2.ErrCode(ce), nil) })
			c.closeWith(fmt.Errorf("h2client: connection error %v from the server's frames: %w", http2.ErrCode(ce), err))
		default:
			c.closeWith(c.readError(err))
		}
		return
	}
}

// readError is what the streams cut by a failed read fail with: after a
// GOAWAY the server's reason (as net/http's GoAwayError), an unexpected EOF
// for a connection that ended without one.
func (c *Conn) readError(err error) error {
	c.mu.Lock()
	goAway, last := c.goAway, c.goAwayLast
	c.mu.Unlock()
	eof := errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
	switch {
	case goAway && eof:
		// Not wrapped: no unexpected EOF, the server said it was going.
		return fmt.Errorf("h2client: connection closed after the server's GOAWAY (last stream %d): %v", last, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("h2client: read: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("h2client: read: %w", err)
}

// flushPending flushes frames written without a flush.
func (c *Conn) flushPending() {
	c.wmu.Lock()
	if c.pending && c.wErr == nil {
		c.wErr = c.bw.Flush()
	}
	c.pending = false
	c.wmu.Unlock()
}

// writeControl writes frames under wmu, flushed now or by the reader before it
// waits (flush false: only the reader may say so).
func (c *Conn) writeControl(flush bool, write func(fr *http2.Framer) error) {
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

// onIdle closes a connection that opened no stream since the last tick and has none.
func (c *Conn) onIdle() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	idle := len(c.streams) == 0 && c.reserved == 0 && c.opened == c.idleSeen
	c.idleSeen = c.opened
	if !idle {
		c.idleTimer.Reset(c.cfg.IdleTimeout)
	}
	c.mu.Unlock()
	if idle {
		c.closeWith(errIdle)
	}
}

// onPingTick pings a connection that read no frame for a tick, and closes it
// when it read none for another.
func (c *Conn) onPingTick() {
	n := c.framesRead.Load()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	silent := n == c.pingSeen
	c.pingSeen = n
	lost := silent && c.pingOut
	send := silent && !c.pingOut
	if !silent {
		c.pingOut = false
	}
	if send {
		c.pingOut = true
	}
	if !lost {
		c.pingTimer.Reset(c.cfg.PingTimeout)
	}
	c.mu.Unlock()
	switch {
	case lost:
		c.closeWith(errLostPing)
	case send:
		c.writeControl(true, func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{'w', 'e', 'f', 't'}) })
	}
}

// resetStream sends RST_STREAM code for id and ends the stream with err.
func (c *Conn) resetStream(id uint32, code http2.ErrCode, err error) {
	c.mu.Lock()
	st := c.streams[id]
	if st == nil {
		c.mu.Unlock()
		return
	}
	st.abortLocked(err)
	c.removeLocked(st)
	c.mu.Unlock()
	c.writeControl(false, func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
	c.afterRemove()
}

// removeLocked forgets st: both sides done, or reset. Its slot is free.
func (c *Conn) removeLocked(st *stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	c.cond.Broadcast()
}

// afterRemove runs after a stream was removed, without locks: a connection
// after GOAWAY closes with its last stream; the hook is told.
func (c *Conn) afterRemove() {
	c.mu.Lock()
	closeNow := c.goAway && len(c.streams) == 0 && c.reserved == 0 && !c.closed
	c.mu.Unlock()
	if closeNow {
		c.closeWith(errClosed)
	}
	c.stateChanged()
}

// process handles one frame; an http2.StreamError or http2.ConnectionError it
// returns is answered by readLoop.
func (c *Conn) process(f http2.Frame) error {
	if !c.gotSettings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return http2.ConnectionError(http2.ErrCodeProtocol) // RFC 9113 §3.4: SETTINGS comes first
		}
		c.gotSettings = true
	}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		st := c.streams[f.StreamID]
		if st == nil {
			c.mu.Unlock()
			return nil
		}
		st.abortLocked(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode, Cause: errFromPeer})
		c.removeLocked(st)
		c.mu.Unlock()
		c.afterRemove()
		return nil
	case *http2.PingFrame:
		if f.IsAck() {
			c.mu.Lock()
			c.pingOut = false
			c.mu.Unlock()
			return nil
		}
		data := f.Data
		c.writeControl(false, func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		return nil
	case *http2.GoAwayFrame:
		c.processGoAway(f)
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // push is disabled in our SETTINGS
	}
	return nil // PRIORITY, unknown and extension frames
}

func (c *Conn) processGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	if !c.goAway || f.LastStreamID < c.goAwayLast {
		c.goAwayLast = f.LastStreamID // a later GOAWAY may only lower it
	}
	c.goAway = true
	last := c.goAwayLast
	for id, st := range c.streams {
		if id <= last {
			continue // the server took it: it finishes it or resets it
		}
		if id == 1 && f.ErrCode != http2.ErrCodeNo {
			// The first stream of a connection refused with an error is not
			// worth another try elsewhere (net/http's rule).
			st.abortLocked(fmt.Errorf("h2client: the server sent GOAWAY with error code %v", f.ErrCode))
		} else {
			st.abortLocked(ErrGoAway)
		}
		c.removeLocked(st)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.afterRemove() // closes the connection when nothing is left on it
}

func (c *Conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.wantAck {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.wantAck = false
		return nil
	}
	var tableSize uint32
	hasTable, sawMax := false, false
	c.mu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(s.Val)
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams, sawMax = int(min(s.Val, 1<<31-1)), true
		case http2.SettingMaxHeaderListSize:
			c.peerMaxHeader = uint64(s.Val)
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initSendWin
			for _, st := range c.streams {
				if st.sendWin+delta > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			for _, st := range c.streams {
				st.sendWin += delta
			}
			c.initSendWin = int64(s.Val)
		case http2.SettingHeaderTableSize:
			tableSize, hasTable = s.Val, true
		}
		return nil
	})
	if err == nil && !c.seenSettings {
		c.seenSettings = true
		if !sawMax {
			c.maxStreams = defaultMaxStreams
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.writeControl(false, func(fr *http2.Framer) error {
		if hasTable {
			c.henc.SetMaxDynamicTableSize(tableSize) // bounded by the encoder's 4096
		}
		return fr.WriteSettingsAck()
	})
	c.stateChanged() // the server may allow more streams now
	return nil
}

func (c *Conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if c.sendWin+int64(f.Increment) > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWin += int64(f.Increment)
		c.cond.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	if st.sendWin+int64(f.Increment) > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.sendWin += int64(f.Increment)
	c.cond.Broadcast()
	return nil
}

// discardData takes a dropped DATA frame's length from the connection window
// and owes it back at once.
func (c *Conn) discardDataLocked(n uint32) (int32, bool) {
	if !c.inflow.Take(n) {
		return 0, false
	}
	return c.inflow.Add(int(n)), true
}

func (c *Conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	c.mu.Lock()
	st := c.streams[id]
	if st == nil {
		if id >= c.nextID {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeProtocol) // a stream never opened
		}
		// A stream this client reset or finished: its credit comes back.
		upd, ok := c.discardDataLocked(f.Length)
		c.mu.Unlock()
		if !ok {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWindowUpdates(0, 0, upd, false)
		return nil
	}
	if st.readDone || st.resp == nil {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol,
			Cause: errors.New("h2client: DATA before the response's HEADERS, or after END_STREAM")}
	}
	data := f.Data()
	if f.Length > 0 {
		if st.isHead && len(data) > 0 {
			c.mu.Unlock()
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errors.New("h2client: DATA on a HEAD request")}
		}
		if f.Length > uint32(c.inflow.Avail) || f.Length > uint32(st.inflow.Avail) {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.inflow.Avail -= int32(f.Length)
		st.inflow.Avail -= int32(f.Length)
		var connUpd, streamUpd int32
		refund := int(f.Length) - len(data) // padding is never read
		if st.bodyClosed {
			refund += len(data) // nobody will read it
		} else if len(data) > 0 {
			if st.buf == nil && len(data) <= respBufSize {
				st.pooled = respBufs.Get().(*[]byte)
				st.buf = (*st.pooled)[:0]
			}
			st.buf = append(st.buf, data...)
		}
		if refund > 0 {
			connUpd = c.inflow.Add(refund)
			if !st.bodyClosed {
				streamUpd = st.inflow.Add(refund)
			}
		}
		st.wakeLocked()
		if connUpd > 0 || streamUpd > 0 {
			c.mu.Unlock()
			c.sendWindowUpdates(id, streamUpd, connUpd, false)
			c.mu.Lock()
		}
	}
	var reset, removed bool
	if f.StreamEnded() {
		reset, removed = c.endRemoteLocked(st, nil)
	}
	c.mu.Unlock()
	c.afterEnd(st, reset, removed)
	return nil
}

// endRemoteLocked is END_STREAM from the server (trailers: its trailers). The
// stream is removed at once, in the same critical section that wakes its
// caller (its slot is free before the caller returns); reset says a
// RST_STREAM is owed (afterEnd), as the request side had not ended.
func (c *Conn) endRemoteLocked(st *stream, trailers map[string][]string) (reset, removed bool) {
	if st.readDone {
		return false, false
	}
	st.readDone = true
	st.trailers = trailers
	st.readErr = io.EOF
	st.wakeLocked()
	if !st.sentEnd {
		// A complete response before the whole request (RFC 9113 §8.1): the
		// rest of the body is not sent.
		st.stopBodyLocked()
	}
	if c.streams[st.id] != st {
		return false, false
	}
	c.removeLocked(st)
	return !st.sentEnd, true
}

// afterEnd finishes, without locks, a stream endRemoteLocked ended.
func (c *Conn) afterEnd(st *stream, reset, removed bool) {
	if reset {
		// NO_ERROR: the response is complete and stays good (net/http's code).
		c.writeControl(false, func(fr *http2.Framer) error { return fr.WriteRSTStream(st.id, http2.ErrCodeNo) })
	}
	if removed {
		c.afterRemove()
	}
}

// sendWindowUpdates returns credit for stream id (when streamUpd > 0) and the
// connection; flushed by the reader before it waits.
func (c *Conn) sendWindowUpdates(id uint32, streamUpd, connUpd int32, flush bool) {
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
