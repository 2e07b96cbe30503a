package httpproxy

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// Bounds of the HTTP/2 server connections' write coalescing (writeBehind).
const (
	// H2WriteBehindBytes bounds the bytes a connection holds accepted but not
	// yet written: a Write that would pass it waits for the socket (backpressure
	// as without coalescing).
	H2WriteBehindBytes = 64 << 10
	// H2DirectWriteBytes: a Write at least this long goes to the socket itself,
	// after what is held, without a copy (large DATA gains nothing from joining).
	H2DirectWriteBytes = 16 << 10
	// H2CloseFlushTimeout bounds how long Close waits for held bytes (a GOAWAY,
	// a last response) to reach a peer that has stopped reading.
	H2CloseFlushTimeout = time.Second
)

// writeBehind joins the HTTP/2 server's writes of one connection into fewer
// socket writes. Go's server writes a response's HEADERS and flushes them
// before the handler's DATA is even queued (the handler waits for its HEADERS
// to be written), so every small response cost two write syscalls, two TLS
// records under mTLS, and two wakeups of the peer (perf: 3 writes per proxied
// request on the server sidecar, 2 with this). A Write here is copied and
// returns; one goroutine per connection writes what is held once every other
// runnable goroutine has had its turn (runtime.Gosched), by when the DATA has
// joined the HEADERS. No timer and no added wait when the process is idle.
// Write errors surface on the next Write (the server then closes the
// connection), as a kernel buffer's would on the next send.
type writeBehind struct {
	conn net.Conn

	mu      sync.Mutex
	cond    sync.Cond // on mu: held bytes or writing changed, or closing
	held    []byte    // accepted, not yet written, in order
	spare   []byte    // the previous held buffer, reused
	writing bool      // a socket write is in flight (the flusher's or a direct one)
	closing bool
	err     error         // the first write error: every later Write returns it
	done    chan struct{} // closed when the flusher has returned
}

func newWriteBehind(c net.Conn) *writeBehind {
	w := &writeBehind{conn: c, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.flusher()
	return w
}

// Write holds p to be written soon, or writes it itself when it is long.
func (w *writeBehind) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) >= H2DirectWriteBytes {
		for w.err == nil && !w.closing && (w.writing || len(w.held) > 0) {
			w.cond.Wait()
		}
		if err := w.stateErr(); err != nil {
			return 0, err
		}
		w.writing = true
		w.mu.Unlock()
		n, err := w.conn.Write(p)
		w.mu.Lock()
		w.writing = false
		if err != nil && w.err == nil {
			w.err = err
		}
		w.cond.Broadcast()
		return n, err
	}
	for w.err == nil && !w.closing && len(w.held) > 0 && len(w.held)+len(p) > H2WriteBehindBytes {
		w.cond.Wait()
	}
	if err := w.stateErr(); err != nil {
		return 0, err
	}
	w.held = append(w.held, p...)
	w.cond.Broadcast()
	return len(p), nil
}

func (w *writeBehind) stateErr() error {
	if w.err != nil {
		return w.err
	}
	if w.closing {
		return net.ErrClosed
	}
	return nil
}

// flusher writes the held bytes until the connection closes (having written
// what was held then) or a write fails.
func (w *writeBehind) flusher() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.err == nil && (w.writing || len(w.held) == 0) && !(w.closing && !w.writing) {
			w.cond.Wait()
		}
		if w.err != nil || len(w.held) == 0 {
			return // failed, or closing with nothing held
		}
		// Let the goroutines made runnable by this write (the handler whose
		// HEADERS it carries, the server loop) add their frames first.
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
		if w.err != nil || w.writing {
			continue
		}
		buf := w.held
		w.held, w.writing = w.spare[:0], true
		w.cond.Broadcast() // room for a Write waiting at the bound
		w.mu.Unlock()
		_, err := w.conn.Write(buf)
		w.mu.Lock()
		w.writing = false
		w.spare = buf[:0]
		if cap(w.spare) > H2WriteBehindBytes {
			w.spare = nil // not kept after a burst
		}
		if err != nil && w.err == nil {
			w.err = err
		}
		w.cond.Broadcast()
	}
}

// close stops taking writes and waits (at most H2CloseFlushTimeout past the
// socket's own write deadline) until what was held has been written; it does
// not close the connection.
func (w *writeBehind) close() {
	w.mu.Lock()
	w.closing = true
	pending := w.writing || len(w.held) > 0
	w.cond.Broadcast()
	w.mu.Unlock()
	if pending {
		_ = w.conn.SetWriteDeadline(time.Now().Add(H2CloseFlushTimeout))
	}
	<-w.done
}
