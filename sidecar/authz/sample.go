package authz

import (
	"sync/atomic"
	"time"
)

// LogInterval bounds the sidecar's authorization logs (denials, AUDIT) to one
// line per interval each, with the count of those left out: a flood of denied
// requests must not become a flood of log lines.
const LogInterval = time.Second

// Sampler lets one log line through per LogInterval, without a lock; the
// request path pays one atomic load when it does not log. Zero value ready.
type Sampler struct {
	last    atomic.Int64 // UnixNano of the last line
	dropped atomic.Uint64
}

// Take reports whether a line may be logged at now and, if so, how many were
// left out since the last one; otherwise it counts this one out.
func (s *Sampler) Take(now time.Time) (ok bool, leftOut uint64) {
	last := s.last.Load()
	if now.UnixNano()-last < int64(LogInterval) || !s.last.CompareAndSwap(last, now.UnixNano()) {
		s.dropped.Add(1)
		return false, 0
	}
	return true, s.dropped.Swap(0)
}
