package highwater

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/store/storetest"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	rec := Record{StoreID: "aaa", Revision: 10, RollbackEpoch: 2}
	now := time.Unix(1000, 0)
	if got, _, _ := Check(Record{StoreID: "a", Revision: 1, RollbackEpoch: 5000}, true, "a", 0, true, now); got.RollbackEpoch != 5001 {
		t.Fatalf("an epoch ahead of the clock: got %d, want 5001", got.RollbackEpoch)
	}
	for _, c := range []struct {
		name   string
		found  bool
		id     string
		head   store.Revision
		accept bool
		want   Record
		err    string
		warn   string
	}{
		{name: "no record: start one", id: "bbb", head: 3, want: Record{StoreID: "bbb", Revision: 3}},
		{name: "same store, same head", found: true, id: "aaa", head: 10, want: Record{StoreID: "aaa", Revision: 10, RollbackEpoch: 2}},
		{name: "same store, ahead", found: true, id: "aaa", head: 12, want: Record{StoreID: "aaa", Revision: 12, RollbackEpoch: 2}},
		{name: "one revision behind", found: true, id: "aaa", head: 9, err: "the store's head is revision 9, but this pilot has served revision 10"},
		{name: "another store", found: true, id: "ccc", head: 50, err: "store id ccc, the record in published-revision.json says aaa"},
		{name: "behind, accepted", found: true, id: "aaa", head: 9, accept: true, want: Record{StoreID: "aaa", Revision: 9, RollbackEpoch: 1000}, warn: "rollback epoch 2 -> 1000"},
		{name: "another store, accepted", found: true, id: "ccc", head: 0, accept: true, want: Record{StoreID: "ccc", Revision: 0, RollbackEpoch: 1000}, warn: "rollback epoch 2 -> 1000"},
		{name: "not behind, accepted all the same", found: true, id: "aaa", head: 10, accept: true, want: Record{StoreID: "aaa", Revision: 10, RollbackEpoch: 1000}, warn: "not behind the record"},
		{name: "no record, accepted", id: "bbb", head: 3, accept: true, want: Record{StoreID: "bbb", Revision: 3, RollbackEpoch: 1000}, warn: "no record"},
		{name: "no identity", id: "", head: 1, err: "no identity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, warn, err := Check(rec, c.found, c.id, c.head, c.accept, now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				if c.id != "" && (!errors.Is(err, ErrRegression) || !strings.Contains(err.Error(), OverrideFlag)) {
					t.Fatalf("err = %v: not ErrRegression naming %s", err, OverrideFlag)
				}
				return
			}
			if err != nil || got != c.want || !strings.Contains(warn, c.warn) || (c.warn == "") != (warn == "") {
				t.Fatalf("Check = %+v, %q, %v; want %+v, warn %q", got, warn, err, c.want, c.warn)
			}
		})
	}
}

func TestLoadSave(t *testing.T) {
	dir := t.TempDir()
	if _, found, err := Load(dir); found || err != nil {
		t.Fatalf("empty dir: found=%v err=%v", found, err)
	}
	want := Record{StoreID: "abc", Revision: 7, RollbackEpoch: 1}
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, found, err := Load(dir); !found || err != nil || got != want {
		t.Fatalf("Load = %+v %v %v", got, found, err)
	}
	path := filepath.Join(dir, FileName)
	for _, c := range []struct{ name, body, err string }{
		{"unknown field", `{"storeID":"a","revision":1,"extra":1}`, "unknown field"},
		{"no store id", `{"revision":1}`, "storeID is empty"},
		{"negative", `{"storeID":"a","revision":-1}`, "revision negative"},
		{"at the size bound", fmt.Sprintf(`{"storeID":"%s","revision":1}`, strings.Repeat("a", MaxFileBytes-27)), ""},
		{"one past the size bound", fmt.Sprintf(`{"storeID":"%s","revision":1}`, strings.Repeat("a", MaxFileBytes-26)), "larger than"},
	} {
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := Load(dir)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s (%d bytes): Load err = %v, want %q", c.name, len(c.body), err, c.err)
		}
	}
}

// TestFollow: the record follows the store's commits (coalesced) and Follow
// returns when ctx ends.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, st, dir, Record{StoreID: st.ID()}, 20*time.Millisecond, hclog.NewNullLogger())
	}()
	var last store.Revision
	for i := range 30 {
		res, err := st.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("shop", fmt.Sprintf("s%d", i), 80)}})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Revision
	}
	testkit.Wait(t, 5*time.Second, func() error {
		rec, _, err := Load(dir)
		if err != nil {
			return err
		}
		if rec.Revision != last || rec.StoreID != st.ID() {
			return fmt.Errorf("record %+v, want revision %d", rec, last)
		}
		return nil
	})
	cancel()
	<-done
}
