package httpproxy

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// replayBuf is a request body shared by the attempts of the general path: the
// first attempt streams it from the client while a copy is kept, up to the
// replay bound, so a retry or fallback can send it again from the start (as
// Envoy buffers for retries while streaming). A body that grows past the bound
// stops being kept and can no longer be replayed (counted). Without keep it
// only tracks how much was read, so a fallback knows whether nothing was sent.
//
// One attempt's transport may still be reading when the next starts: reads of
// the client's body are serialized (reading, cond) and the lock is never held
// across one, so ending the request (done) never waits on the client.
type replayBuf struct {
	mu      sync.Mutex
	cond    sync.Cond // on mu: a read of src ended
	src     io.Reader
	bp      *[]byte // the kept bytes (from pool); nil when not kept, once past the bound, or done
	pool    *sync.Pool
	stats   *RetryStats
	n       int64 // bytes read from src
	over    bool  // grew past the bound
	reading bool  // a read of src is in flight (mu not held)
	closed  bool
	err     error // src's error, io.EOF at its end
}

var (
	errReplayDetached = errors.New("request body: attempt abandoned")
	errReplayLost     = errors.New("request body: bytes already sent were not kept")
)

// newReplay wraps src; keep says whether to keep a copy for replay.
func (p *Proxy) newReplay(src io.Reader, keep bool) *replayBuf {
	b := &replayBuf{src: src, pool: &p.bodies, stats: &p.retries}
	b.cond.L = &b.mu
	if keep {
		bp := p.bodies.Get().(*[]byte)
		*bp = (*bp)[:0]
		b.bp = bp
	}
	return b
}

// replayable reports whether another attempt can send the whole body.
func (b *replayBuf) replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bp != nil && (b.err == nil || b.err == io.EOF)
}

// consumed is how much of the client's body has been read.
func (b *replayBuf) consumed() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// reader is a new attempt's view of the body, from its start.
func (b *replayBuf) reader() *replayReader { return &replayReader{b: b} }

// done ends the request: later reads fail; the kept bytes go back to the pool
// unless a read is still in flight (then the garbage collector has them).
func (b *replayBuf) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.bp != nil && !b.reading {
		b.pool.Put(b.bp)
	}
	b.bp = nil
	b.cond.Broadcast()
}

type replayReader struct {
	b        *replayBuf
	off      int64
	detached atomic.Bool
}

func (r *replayReader) Read(p []byte) (int, error) {
	b := r.b
	b.mu.Lock()
	for {
		switch {
		case r.detached.Load() || b.closed:
			b.mu.Unlock()
			return 0, errReplayDetached
		case b.bp != nil && r.off < int64(len(*b.bp)):
			n := copy(p, (*b.bp)[r.off:])
			r.off += int64(n)
			b.mu.Unlock()
			return n, nil
		case r.off != b.n:
			b.mu.Unlock()
			return 0, errReplayLost
		case b.err != nil:
			b.mu.Unlock()
			return 0, b.err
		}
		if !b.reading {
			break
		}
		b.cond.Wait()
	}
	b.reading = true
	b.mu.Unlock()
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	b.cond.Broadcast()
	if b.closed {
		return 0, errReplayDetached
	}
	if bp := b.bp; bp != nil {
		if len(*bp)+n <= cap(*bp) {
			*bp = append(*bp, p[:n]...)
		} else {
			b.over, b.bp = true, nil
			b.pool.Put(bp)
			b.stats.BodyNotBuffered[NotBufferedTooLarge].Add(1)
		}
	}
	b.n += int64(n)
	r.off += int64(n)
	if err != nil {
		b.err = err
	}
	return n, err
}

// Close detaches this attempt: a transport still reading stops at its next read.
// The client's body itself stays open for the next attempt.
func (r *replayReader) Close() error {
	r.detached.Store(true)
	return nil
}
