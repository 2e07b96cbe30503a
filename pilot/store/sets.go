package store

import (
	"context"
	"fmt"
	"strings"
)

// Sets is implemented by stores that keep, beside the resources, small named
// sets of pilot-internal records that every pilot on the store shares (the
// CA's revocations). They are not resources: the admin API cannot read or
// write them, the mesh compile never sees them, and writing them does not move
// the store Revision. Each set has its own revision, 0 while it was never
// written, which grows on every SetApply; on etcd it is etcd's own revision,
// shared by every replica, so two replicas that read one set revision read
// the same records.
type Sets interface {
	// SetApply puts and deletes records of set as one new revision of the set
	// (all or nothing) and returns it. Deleting a missing record is not an
	// error. See ValidateSetApply for the bounds.
	SetApply(ctx context.Context, set string, put []SetRecord, del []string) (Revision, error)
	// SetList returns every record of set, sorted by name, and the set's
	// revision they were read at.
	SetList(ctx context.Context, set string) ([]SetRecord, Revision, error)
	// SetRevision returns the set's revision alone: cheap enough to poll.
	SetRevision(ctx context.Context, set string) (Revision, error)
}

// SetRecord is one record of a set.
type SetRecord struct {
	Name  string
	Value []byte
}

// Bounds of one SetApply. MaxSetApply stays under etcd's default
// --max-txn-ops (128) with room for the set's revision marker.
const (
	MaxSetApply       = 100
	MaxSetNameBytes   = 128
	MaxSetRecordBytes = 4 << 10
)

// ValidateSetApply checks a SetApply before any backend touches storage:
// set and record names non-empty, at most MaxSetNameBytes, without NUL;
// 1..MaxSetApply records; values at most MaxSetRecordBytes; a
// name at most once. Errors wrap ErrInvalid and name the set and record.
func ValidateSetApply(set string, put []SetRecord, del []string) error {
	if err := checkSetName(set); err != nil {
		return fmt.Errorf("%w: set %q: %s", ErrInvalid, set, err)
	}
	if strings.Contains(set, "/") { // backends build keys <set>/<record>
		return fmt.Errorf("%w: set %q: name contains '/'", ErrInvalid, set)
	}
	n := len(put) + len(del)
	if n == 0 || n > MaxSetApply {
		return fmt.Errorf("%w: set %s: %d records in one apply, want 1..%d", ErrInvalid, set, n, MaxSetApply)
	}
	seen := make(map[string]struct{}, n)
	check := func(name string) error {
		if err := checkSetName(name); err != nil {
			return fmt.Errorf("%w: set %s: record %q: %s", ErrInvalid, set, name, err)
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%w: set %s: record %q appears more than once in one apply", ErrInvalid, set, name)
		}
		seen[name] = struct{}{}
		return nil
	}
	for _, r := range put {
		if err := check(r.Name); err != nil {
			return err
		}
		if len(r.Value) > MaxSetRecordBytes {
			return fmt.Errorf("%w: set %s: record %q: %d bytes, over the bound of %d", ErrInvalid, set, r.Name, len(r.Value), MaxSetRecordBytes)
		}
	}
	for _, name := range del {
		if err := check(name); err != nil {
			return err
		}
	}
	return nil
}

func checkSetName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("name is empty")
	case len(s) > MaxSetNameBytes:
		return fmt.Errorf("name is %d bytes, over the bound of %d", len(s), MaxSetNameBytes)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("name contains NUL")
	}
	return nil
}
