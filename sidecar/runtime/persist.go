package runtime

import (
	"sync"
	"time"

	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
)

// pendingSave is one last-known-good snapshot queued for the disk. seq orders
// saves: a higher seq is a newer state of the runtime.
type pendingSave struct {
	seq  uint64
	at   time.Time // when it was queued (the runtime clock), shown as SavedAt
	snap *lkg.Snapshot
}

// saver writes last-known-good snapshots on a goroutine of its own, so an fsync
// never runs under the runtime's lock and the xDS stream never waits for the
// disk. Newest wins: a save queued while another is being written replaces any
// save still waiting, and a save older than one already queued is dropped, so an
// older snapshot is never written over a newer one. The writer goroutine runs
// only while there is something to write; flush waits for it.
type saver struct {
	r *Runtime

	mu      sync.Mutex    // guards the fields below; never held across a write
	next    *pendingSave  // newest save not yet picked up by the writer
	offered uint64        // seq of the newest save offered
	done    chan struct{} // closed when the running writer exits; nil while none runs
}

// offer queues p (nil: nothing to save) and starts the writer if none runs.
// Called without the runtime's lock held.
func (s *saver) offer(p *pendingSave) {
	if p == nil {
		return
	}
	s.mu.Lock()
	if p.seq <= s.offered {
		s.mu.Unlock()
		return
	}
	s.offered, s.next = p.seq, p
	var done chan struct{}
	if s.done == nil {
		done = make(chan struct{})
		s.done = done
	}
	s.mu.Unlock()
	if done != nil {
		go s.run(done)
	}
}

// run writes queued saves, the newest each time, until none is left.
func (s *saver) run(done chan struct{}) {
	defer close(done)
	for {
		s.mu.Lock()
		p := s.next
		s.next = nil
		if p == nil {
			s.done = nil
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		err := s.r.cfg.Save(s.r.cfg.StateDir, p.snap)
		s.r.saved(p.seq, p.at, err)
	}
}

// flush waits until every save offered before the call is written (or failed).
func (s *saver) flush() {
	for {
		s.mu.Lock()
		done := s.done
		s.mu.Unlock()
		if done == nil {
			return
		}
		<-done
	}
}
