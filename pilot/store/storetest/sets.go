package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/pilot/store"
)

// RunSets checks a store.Sets backend. open returns two handles on one
// fresh store (the same one twice, or two replicas on one etcd prefix): what
// one writes the other reads, at the same set revision.
func RunSets(t *testing.T, open func(t *testing.T) (a, b store.Sets)) {
	ctx := context.Background()
	t.Run("EmptyThenApply", func(t *testing.T) {
		a, b := open(t)
		recs, rev, err := a.SetList(ctx, "s1")
		if err != nil || len(recs) != 0 || rev != 0 {
			t.Fatalf("never written: %v %d %v, want empty at revision 0", recs, rev, err)
		}
		r1, err := a.SetApply(ctx, "s1", []store.SetRecord{{Name: "b", Value: []byte("2")}, {Name: "a", Value: []byte("1")}}, nil)
		if err != nil || r1 <= 0 {
			t.Fatalf("SetApply: %d %v", r1, err)
		}
		recs, rev, err = b.SetList(ctx, "s1")
		if err != nil || rev != r1 || len(recs) != 2 || recs[0].Name != "a" || string(recs[0].Value) != "1" || recs[1].Name != "b" {
			t.Fatalf("other handle: %v at %d (%v), want a=1, b=2 at %d", recs, rev, err, r1)
		}
		if got, err := b.SetRevision(ctx, "s1"); err != nil || got != r1 {
			t.Fatalf("SetRevision: %d %v, want %d", got, err, r1)
		}
		// Another set is untouched.
		if recs, rev, err := b.SetList(ctx, "s2"); err != nil || len(recs) != 0 || rev != 0 {
			t.Fatalf("other set: %v %d %v", recs, rev, err)
		}
		r2, err := b.SetApply(ctx, "s1", []store.SetRecord{{Name: "c", Value: []byte("3")}}, []string{"a", "missing"})
		if err != nil || r2 <= r1 {
			t.Fatalf("second SetApply: %d %v, want a revision after %d", r2, err, r1)
		}
		recs, rev, err = a.SetList(ctx, "s1")
		if err != nil || rev != r2 || len(recs) != 2 || recs[0].Name != "b" || recs[1].Name != "c" {
			t.Fatalf("after delete: %v at %d (%v), want b, c at %d", recs, rev, err, r2)
		}
	})
	t.Run("Bounds", func(t *testing.T) {
		a, _ := open(t)
		recs := func(n, size int) []store.SetRecord {
			out := make([]store.SetRecord, n)
			for i := range out {
				out[i] = store.SetRecord{Name: fmt.Sprintf("r%04d", i), Value: []byte(strings.Repeat("x", size))}
			}
			return out
		}
		if _, err := a.SetApply(ctx, "b", recs(store.MaxSetApply, store.MaxSetRecordBytes), nil); err != nil {
			t.Fatalf("%d records of %d bytes (the bounds): %v", store.MaxSetApply, store.MaxSetRecordBytes, err)
		}
		for name, c := range map[string]struct {
			set  string
			put  []store.SetRecord
			del  []string
			want string
		}{
			"one record over":       {"b", recs(store.MaxSetApply+1, 1), nil, "records in one apply"},
			"puts and deletes over": {"b", recs(store.MaxSetApply, 1), []string{"z"}, "records in one apply"},
			"none":                  {"b", nil, nil, "records in one apply"},
			"one byte over":         {"b", recs(1, store.MaxSetRecordBytes+1), nil, "over the bound"},
			"empty set name":        {"", recs(1, 1), nil, "name is empty"},
			"slash in set":          {"a/b", recs(1, 1), nil, "'/'"},
			"empty record name":     {"b", []store.SetRecord{{Name: ""}}, nil, "name is empty"},
			"long record name":      {"b", []store.SetRecord{{Name: strings.Repeat("n", store.MaxSetNameBytes+1)}}, nil, "over the bound"},
			"twice":                 {"b", recs(1, 1), []string{"r0000"}, "more than once"},
		} {
			_, err := a.SetApply(ctx, c.set, c.put, c.del)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.want)
			}
		}
		if _, err := a.SetApply(ctx, "b", []store.SetRecord{{Name: strings.Repeat("n", store.MaxSetNameBytes)}}, nil); err != nil {
			t.Errorf("record name of %d bytes (the bound): %v", store.MaxSetNameBytes, err)
		}
		got, _, err := a.SetList(ctx, "b")
		if err != nil || len(got) != store.MaxSetApply+1 {
			t.Fatalf("after refused applies: %d records (%v), want %d: nothing half-applied", len(got), err, store.MaxSetApply+1)
		}
	})
}
