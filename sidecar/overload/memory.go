package overload

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// Bounds of MemoryConfig.
const (
	// MinMemoryLimit is the smallest memory ceiling accepted: below it the
	// sidecar's own code and buffers would shed every request.
	MinMemoryLimit = 16 << 20
	// MaxMemoryLimit is the largest (1 TiB; anything larger is a typo).
	MaxMemoryLimit = 1 << 40
	// MinHighWater and MaxHighWater bound MemoryConfig.HighWater.
	MinHighWater = 0.1
	MaxHighWater = 1.0
	// MemoryHysteresis: shedding stops once use is this fraction of the limit
	// below the high-water mark, so it does not flap on every sample.
	MemoryHysteresis = 0.05
	// DefaultMemoryInterval is how often memory is sampled; MinMemoryInterval
	// and MaxMemoryInterval bound MemoryConfig.Interval.
	DefaultMemoryInterval = 50 * time.Millisecond
	MinMemoryInterval     = time.Millisecond
	MaxMemoryInterval     = 10 * time.Second
	// MemoryGCInterval: while shedding, a garbage collection at most this often
	// makes the reading count live memory only. Without it an idle sidecar,
	// which allocates too little to trigger a GC, would keep reading the garbage
	// its last burst left and shed long after the load ended.
	MemoryGCInterval = time.Second
)

// MemoryConfig configures a Memory guard.
type MemoryConfig struct {
	// Limit is the memory ceiling in bytes (the caller also gives it to the Go
	// runtime as its soft limit, debug.SetMemoryLimit). MinMemoryLimit..MaxMemoryLimit.
	Limit int64
	// HighWater is the fraction of Limit at and above which new requests are
	// shed. MinHighWater..MaxHighWater.
	HighWater float64
	// Interval is the sampling period; 0 means DefaultMemoryInterval.
	Interval time.Duration
	// Read returns the memory in use, in bytes; nil reads the Go runtime's
	// mapped memory less free heap (returned to the OS or not: the runtime can
	// reuse or return it). Tests substitute it.
	Read func() uint64
	// GC collects garbage while shedding (at most every MemoryGCInterval); nil
	// is runtime.GC.
	GC func()
	// Now is the clock for GC pacing; nil is time.Now.
	Now func() time.Time
}

// Memory decides whether to shed new requests because the process is near its
// memory ceiling. Run samples memory on a ticker into atomics; the request path
// calls Shedding, three atomic loads.
//
// Sampling alone admits too much under a body-heavy load: an HTTP/2 request is
// admitted when it starts, and its client then sends up to the flow-control
// credit the sidecar granted (a MiB), which the sampled figure shows only later,
// so every request admitted before the next sample brings memory nobody counted.
// Whoever grants such credit reports it with Commit (h2server's
// BodyBytesCommitted); Shedding and Sample count it on top of the sample. Bytes
// that arrived and are still held count twice until the next sample, which sheds
// a little early and never late.
type Memory struct {
	limit, high, low uint64
	interval         time.Duration
	read             func() uint64
	gc               func()
	now              func() time.Time
	lastGC           time.Time // written by Sample only

	used      atomic.Uint64 // last sample, written by Run only
	committed atomic.Int64  // Commit's total
	shedding  atomic.Bool   // written by Run only
	sheds     atomic.Uint64 // requests shed, counted by the request path
}

// NewMemory checks cfg.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultMemoryInterval
	}
	switch {
	case cfg.Limit < MinMemoryLimit || cfg.Limit > MaxMemoryLimit:
		return nil, fmt.Errorf("%w: memory limit %d bytes outside %d..%d", ErrConfig, cfg.Limit, MinMemoryLimit, int64(MaxMemoryLimit))
	case !(cfg.HighWater >= MinHighWater && cfg.HighWater <= MaxHighWater): // also rejects NaN
		return nil, fmt.Errorf("%w: memory high-water fraction %v outside %v..%v", ErrConfig, cfg.HighWater, MinHighWater, MaxHighWater)
	case cfg.Interval < MinMemoryInterval || cfg.Interval > MaxMemoryInterval:
		return nil, fmt.Errorf("%w: memory sampling interval %s outside %s..%s", ErrConfig, cfg.Interval, MinMemoryInterval, MaxMemoryInterval)
	}
	m := &Memory{limit: uint64(cfg.Limit), interval: cfg.Interval, read: cfg.Read, gc: cfg.GC, now: cfg.Now}
	if m.gc == nil {
		m.gc = runtime.GC
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.high = uint64(float64(cfg.Limit) * cfg.HighWater)
	m.low = uint64(float64(cfg.Limit) * max(cfg.HighWater-MemoryHysteresis, 0))
	if m.read == nil {
		m.read = newRuntimeReader()
	}
	m.Sample()
	return m, nil
}

// Run samples every interval until ctx ends.
func (m *Memory) Run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Sample()
		}
	}
}

// Sample reads memory once and updates Shedding. Run calls it; it is exported for
// tests and for a caller that wants a fresh reading. Not for concurrent use with Run.
func (m *Memory) Sample() {
	u := m.read()
	if u+m.Committed() >= m.low && m.shedding.Load() {
		// Still shedding: is it live memory, or garbage not yet collected?
		if now := m.now(); now.Sub(m.lastGC) >= MemoryGCInterval {
			m.lastGC = now
			m.gc()
			u = m.read()
		}
	}
	m.used.Store(u)
	switch total := u + m.Committed(); {
	case total >= m.high:
		m.shedding.Store(true)
	case total < m.low:
		m.shedding.Store(false)
	}
}

// Shedding reports whether new requests must be refused: the last sample said
// so, or the sample and what is committed since reach the high-water mark. nil
// never sheds.
func (m *Memory) Shedding() bool {
	return m != nil && (m.shedding.Load() || m.used.Load()+m.Committed() >= m.high)
}

// Commit adds delta (negative: released) to the memory promised but perhaps not
// yet in the sample: request-body bytes a client may send under credit granted,
// or holds unread. Safe for concurrent use; a nil Memory ignores it.
func (m *Memory) Commit(delta int64) {
	if m != nil {
		m.committed.Add(delta)
	}
}

// Committed is Commit's total, in bytes (0 if it ever went negative).
func (m *Memory) Committed() uint64 {
	if m == nil {
		return 0
	}
	return uint64(max(m.committed.Load(), 0))
}

// Shed counts one refused request.
func (m *Memory) Shed() { m.sheds.Add(1) }

// Sheds is the number of requests shed so far.
func (m *Memory) Sheds() uint64 { return m.sheds.Load() }

// Used is the last sampled memory in use, in bytes.
func (m *Memory) Used() uint64 { return m.used.Load() }

// Limit is the ceiling in bytes.
func (m *Memory) Limit() uint64 { return m.limit }

// HighWater is the byte count at and above which requests are shed.
func (m *Memory) HighWater() uint64 { return m.high }

// newRuntimeReader reads the runtime's mapped memory less free heap pages (those
// returned to the OS and those it may return or reuse): what the process holds
// and cannot give back without freeing objects. metrics.Read with a reused sample
// slice does not allocate.
func newRuntimeReader() func() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	return func() uint64 {
		metrics.Read(s)
		total, free := s[0].Value.Uint64(), s[1].Value.Uint64()+s[2].Value.Uint64()
		if free > total {
			return 0
		}
		return total - free
	}
}
