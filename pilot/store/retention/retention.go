// Package retention compacts the store's history by policy: keep at least the
// last KeepRevisions revisions and at least KeepFor of history, drop what is
// older than both. Nothing compacted the store before (issue #11): history
// grew with every apply for the store's life.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/store"
)

// Defaults and bounds of Policy (pilot's --history-revisions,
// --history-retention, --compact-interval).
const (
	DefaultKeepRevisions = 1000
	MinKeepRevisions     = 1
	MaxKeepRevisions     = 10_000_000
	DefaultKeepFor       = 24 * time.Hour
	MaxKeepFor           = 365 * 24 * time.Hour
	DefaultInterval      = time.Minute
	MinInterval          = time.Second
	MaxInterval          = 24 * time.Hour
	// MaxMarks bounds the (revision, time) marks kept to date history; past it
	// neighbours are merged, which only makes compaction later, never earlier.
	MaxMarks = 1024
)

// Policy says what history to keep.
type Policy struct {
	KeepRevisions int64         // the last this many revisions are kept
	KeepFor       time.Duration // history younger than this is kept
	Interval      time.Duration // how often to compact
}

// DefaultPolicy is the policy with every default.
func DefaultPolicy() Policy {
	return Policy{KeepRevisions: DefaultKeepRevisions, KeepFor: DefaultKeepFor, Interval: DefaultInterval}
}

// Check says which field is out of bounds.
func (p Policy) Check() error {
	switch {
	case p.KeepRevisions < MinKeepRevisions || p.KeepRevisions > MaxKeepRevisions:
		return fmt.Errorf("history revisions %d outside %d..%d", p.KeepRevisions, MinKeepRevisions, MaxKeepRevisions)
	case p.KeepFor < 0 || p.KeepFor > MaxKeepFor:
		return fmt.Errorf("history retention %s outside 0..%s", p.KeepFor, MaxKeepFor)
	case p.Interval < MinInterval || p.Interval > MaxInterval:
		return fmt.Errorf("compact interval %s outside %s..%s", p.Interval, MinInterval, MaxInterval)
	}
	return nil
}

// Mark says every revision up to Rev was committed at or before At.
type Mark struct {
	Rev store.Revision
	At  time.Time
}

// AddMark appends m to marks (ascending by Rev), merging the oldest two when
// the bound is reached: a merged mark keeps the later revision and the later
// time, so the revisions it covers look younger than they are (kept longer).
func AddMark(marks []Mark, m Mark) []Mark {
	if n := len(marks); n > 0 && m.Rev <= marks[n-1].Rev {
		return marks
	}
	if len(marks) >= MaxMarks {
		marks = append(marks[:0], marks[1:]...) // marks[1] now covers marks[0]'s revisions
	}
	return append(marks, m)
}

// Cutoff is the revision to compact before at now (0: nothing): no later than
// head-KeepRevisions+1 (the last KeepRevisions stay) and no later than one
// past the newest mark older than KeepFor (younger history stays). A pure
// function of its arguments.
func Cutoff(marks []Mark, head store.Revision, now time.Time, p Policy) store.Revision {
	byCount := head - store.Revision(p.KeepRevisions) + 1
	var byTime store.Revision
	for _, m := range marks {
		if m.At.Before(now.Add(-p.KeepFor)) {
			byTime = m.Rev + 1
		}
	}
	c := min(byCount, byTime)
	if c < 0 {
		return 0
	}
	return c
}

// Run compacts st by p until ctx ends: it dates revisions by watching commits
// (the head when it starts is dated now, so history from before pilot started
// is kept at least KeepFor), and every Interval compacts before Cutoff. A
// store that cannot compact (no store.Compactor) is an error at once.
func Run(ctx context.Context, st store.Store, p Policy, log hclog.Logger) error {
	if err := p.Check(); err != nil {
		return err
	}
	c, ok := st.(store.Compactor)
	if !ok {
		return fmt.Errorf("store %T cannot compact its history", st)
	}
	head, err := st.Revision(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return nil // shut down before it began
		}
		return fmt.Errorf("retention: %w", err)
	}
	marks := AddMark(nil, Mark{Rev: head, At: time.Now()})
	w, err := st.Watch(ctx, head)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return nil
		}
		return fmt.Errorf("retention: %w", err)
	}
	tick := time.NewTicker(p.Interval)
	defer tick.Stop()
	var done store.Revision
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				if errors.Is(w.Err(), store.ErrClosed) || ctx.Err() != nil {
					return nil
				}
				// Cut for falling behind: date from the head again.
				if head, err = st.Revision(ctx); err != nil {
					return nil
				}
				marks = AddMark(marks, Mark{Rev: head, At: time.Now()})
				if w, err = st.Watch(ctx, head); err != nil {
					return nil
				}
				continue
			}
			head = max(head, ev.Revision)
			marks = AddMark(marks, Mark{Rev: ev.Revision, At: time.Now()})
		case now := <-tick.C:
			cut := Cutoff(marks, head, now, p)
			if cut <= done {
				continue
			}
			if err := c.Compact(ctx, cut); err != nil {
				if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
					log.Warn("compacting history failed", "before", cut, "error", err)
				}
				continue
			}
			done = cut
			log.Info("history compacted", "before", cut, "head", head, "keep_revisions", p.KeepRevisions, "keep_for", p.KeepFor)
			for len(marks) > 1 && marks[0].Rev < cut {
				marks = marks[1:]
			}
		}
	}
}
