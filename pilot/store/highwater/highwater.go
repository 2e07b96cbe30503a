// Package highwater keeps pilot's record of the newest store revision it has
// served, beside its publisher key, so that a store that went backwards (a
// damaged meta page read one revision back, a backup restored over it, a
// 0-byte or replaced file, another etcd cluster) is refused at start instead
// of being served, signed, to every sidecar. A deliberate regression is
// accepted with --accept-store-regression: the record's rollback epoch goes up,
// pilot signs it into every manifest, and sidecars then accept revisions lower
// than the one they run (they refuse them otherwise).
package highwater

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/internal/atomicfile"
	"github.com/weft-mesh/weft/pilot/store"
)

// FileName is the record inside pilot's data directory.
const FileName = "published-revision.json"

// MaxFileBytes bounds the record pilot reads at start.
const MaxFileBytes = 4 << 10

// OverrideFlag is the pilot flag that accepts a store behind the record.
const OverrideFlag = "--accept-store-regression"

// Record is what pilot has served: from which store, up to which revision, and
// the rollback epoch it signs into manifests.
type Record struct {
	StoreID       string         `json:"storeID"`
	Revision      store.Revision `json:"revision"`
	RollbackEpoch uint64         `json:"rollbackEpoch"`
}

// ErrRegression is a store behind pilot's record (or another store).
var ErrRegression = errors.New("store went backwards")

// Load reads dir's record; found is false when there is none (a new data
// directory, or one from before records existed).
func Load(dir string) (rec Record, found bool, err error) {
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("highwater: %w", err)
	}
	defer f.Close()
	b := make([]byte, MaxFileBytes+1)
	n, _ := f.Read(b)
	if n > MaxFileBytes {
		return Record{}, false, fmt.Errorf("highwater: %s is larger than %d bytes", path, MaxFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b[:n]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return Record{}, false, fmt.Errorf("highwater: %s: %w (remove it only if this data directory's store is known good)", path, err)
	}
	if rec.StoreID == "" || rec.Revision < 0 {
		return Record{}, false, fmt.Errorf("highwater: %s: storeID is empty or revision negative", path)
	}
	return rec, true, nil
}

// Save writes the record atomically (fsync'd).
func Save(dir string, rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, FileName), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("highwater: %w", err)
	}
	return nil
}

// Check decides whether pilot may serve a store whose identity is id and head
// revision head, given its record (found: there is one). It returns the record
// to keep from now on. Without accept, another store or a head behind the
// record is ErrRegression with what differs and how to override; with accept,
// such a store is taken and the rollback epoch goes up (warn says so). A pure
// function: pilot calls it before serving anything.
//
// The epoch an acceptance moves to is the later of the record's plus one and
// now in Unix seconds: sidecars keep the epoch they run, so it must go up even
// when the record was lost (a new data directory); a clock is monotonic enough
// across restarts for that, and the record covers a clock set back.
func Check(rec Record, found bool, id string, head store.Revision, accept bool, now time.Time) (next Record, warn string, err error) {
	if id == "" {
		return Record{}, "", errors.New("highwater: the store has no identity")
	}
	bump := func() uint64 { return max(rec.RollbackEpoch+1, uint64(max(now.Unix(), 0))) }
	var what string
	switch {
	case !found && accept:
		next = Record{StoreID: id, Revision: head, RollbackEpoch: bump()}
		return next, fmt.Sprintf("no record of what this pilot served; %s given: rollback epoch %d -> %d", OverrideFlag, rec.RollbackEpoch, next.RollbackEpoch), nil
	case !found:
		return Record{StoreID: id, Revision: head}, "", nil
	case rec.StoreID != id:
		what = fmt.Sprintf("the store is not the one this pilot served (store id %s, the record in %s says %s: an empty, replaced or different store)", id, FileName, rec.StoreID)
	case head < rec.Revision:
		what = fmt.Sprintf("the store's head is revision %d, but this pilot has served revision %d (store id %s): a damaged or restored store would serve an older mesh", head, rec.Revision, id)
	case accept:
		// Deliberate: the operator may know better than the record (sidecars
		// that ran a later revision than this pilot saw).
		next = Record{StoreID: id, Revision: head, RollbackEpoch: bump()}
		return next, fmt.Sprintf("the store is not behind the record (revision %d, served %d), but %s given: rollback epoch %d -> %d", head, rec.Revision, OverrideFlag, rec.RollbackEpoch, next.RollbackEpoch), nil
	default:
		return Record{StoreID: id, Revision: head, RollbackEpoch: rec.RollbackEpoch}, "", nil
	}
	if !accept {
		return Record{}, "", fmt.Errorf("%w: %s; refusing to start. If this is deliberate (a restore you mean to roll back to), start pilot once with %s: sidecars are then told to accept the older revision", ErrRegression, what, OverrideFlag)
	}
	next = Record{StoreID: id, Revision: head, RollbackEpoch: bump()}
	return next, fmt.Sprintf("%s; accepted by %s: rollback epoch %d -> %d", what, OverrideFlag, rec.RollbackEpoch, next.RollbackEpoch), nil
}

// Follow records the store's revisions as they commit, until ctx ends: after
// every batch of events it writes the newest revision (writes are coalesced:
// at most one per minInterval). It re-watches from the head when the watch is
// cut (a slow writer) and returns when ctx ends or the store closes. Only the
// one goroutine calling Follow writes the file.
func Follow(ctx context.Context, st store.Store, dir string, rec Record, minInterval time.Duration, log hclog.Logger) {
	last := rec.Revision
	for ctx.Err() == nil {
		w, err := st.Watch(ctx, last)
		if errors.Is(err, store.ErrCompacted) {
			// History before last is gone; the head is what matters.
			if last, err = st.Revision(ctx); err == nil {
				continue
			}
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				log.Warn("recording served revisions: watch failed", "error", err)
			}
			return
		}
		var written time.Time
		pending := false
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for open := true; open; {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					open = false
					break
				}
				if ev.Revision > last {
					last, pending = ev.Revision, true
				}
				if pending && time.Since(written) >= minInterval {
					rec.Revision = last
					if err := Save(dir, rec); err != nil {
						log.Error("recording served revision failed", "revision", last, "error", err)
					}
					written, pending = time.Now(), false
				} else if pending {
					timer.Reset(minInterval - time.Since(written))
				}
			case <-timer.C:
				if pending {
					rec.Revision = last
					if err := Save(dir, rec); err != nil {
						log.Error("recording served revision failed", "revision", last, "error", err)
					}
					written, pending = time.Now(), false
				}
			}
		}
		timer.Stop()
		if pending {
			rec.Revision = last
			if err := Save(dir, rec); err != nil {
				log.Error("recording served revision failed", "revision", last, "error", err)
			}
		}
		if errors.Is(w.Err(), store.ErrClosed) {
			return
		}
	}
}
