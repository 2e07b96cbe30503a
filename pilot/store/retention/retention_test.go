package retention

import (
	"context"
	"errors"
	"fmt"
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

func TestCutoff(t *testing.T) {
	t0 := time.Unix(10000, 0)
	marks := []Mark{{Rev: 10, At: t0}, {Rev: 20, At: t0.Add(time.Hour)}, {Rev: 30, At: t0.Add(2 * time.Hour)}}
	for _, c := range []struct {
		name string
		head store.Revision
		now  time.Time
		p    Policy
		want store.Revision
	}{
		{"nothing old enough", 30, t0.Add(30 * time.Minute), Policy{KeepRevisions: 1, KeepFor: time.Hour}, 0},
		{"first mark old", 30, t0.Add(61 * time.Minute), Policy{KeepRevisions: 1, KeepFor: time.Hour}, 11},
		{"two marks old", 30, t0.Add(121 * time.Minute), Policy{KeepRevisions: 1, KeepFor: time.Hour}, 21},
		{"count keeps more", 30, t0.Add(10 * time.Hour), Policy{KeepRevisions: 25, KeepFor: time.Hour}, 6},
		{"time keeps more", 30, t0.Add(61 * time.Minute), Policy{KeepRevisions: 5, KeepFor: time.Hour}, 11},
		{"keep all by count", 30, t0.Add(10 * time.Hour), Policy{KeepRevisions: 1000, KeepFor: 0}, 0},
		{"keep for 0, keep 1", 30, t0.Add(10 * time.Hour), Policy{KeepRevisions: 1, KeepFor: 0}, 30},
	} {
		if got := Cutoff(marks, c.head, c.now, c.p); got != c.want {
			t.Errorf("%s: Cutoff = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestAddMarkBound(t *testing.T) {
	var marks []Mark
	t0 := time.Unix(0, 0)
	for i := range MaxMarks {
		marks = AddMark(marks, Mark{Rev: store.Revision(i + 1), At: t0.Add(time.Duration(i) * time.Second)})
	}
	if len(marks) != MaxMarks || marks[0].Rev != 1 {
		t.Fatalf("at the bound: %d marks, first %d", len(marks), marks[0].Rev)
	}
	marks = AddMark(marks, Mark{Rev: MaxMarks + 1, At: t0.Add(time.Hour)})
	if len(marks) != MaxMarks || marks[0].Rev != 2 || marks[len(marks)-1].Rev != MaxMarks+1 {
		t.Fatalf("one past the bound: %d marks, first %d last %d", len(marks), marks[0].Rev, marks[len(marks)-1].Rev)
	}
	if n := len(AddMark(marks, Mark{Rev: 5, At: t0})); n != MaxMarks {
		t.Fatalf("an older mark was added: %d", n)
	}
}

func TestPolicyCheck(t *testing.T) {
	ok := DefaultPolicy()
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{KeepRevisions: MinKeepRevisions, KeepFor: 0, Interval: MinInterval}, ""},
		{Policy{KeepRevisions: MaxKeepRevisions, KeepFor: MaxKeepFor, Interval: MaxInterval}, ""},
		{Policy{KeepRevisions: MinKeepRevisions - 1, Interval: time.Minute}, "history revisions 0"},
		{Policy{KeepRevisions: MaxKeepRevisions + 1, Interval: time.Minute}, "history revisions 10000001"},
		{Policy{KeepRevisions: 1, KeepFor: MaxKeepFor + 1, Interval: time.Minute}, "history retention"},
		{Policy{KeepRevisions: 1, KeepFor: -1, Interval: time.Minute}, "history retention"},
		{Policy{KeepRevisions: 1, Interval: MinInterval - 1}, "compact interval"},
		{Policy{KeepRevisions: 1, Interval: MaxInterval + 1}, "compact interval"},
	} {
		err := c.p.Check()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: Check = %v, want %q", c.p, err, c.want)
		}
	}
}

// TestRun: with the real store, history beyond the policy is compacted and
// the kept revisions stay readable.
func TestRun(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, st, Policy{KeepRevisions: 3, KeepFor: 0, Interval: MinInterval}, hclog.NewNullLogger())
	}()
	svc := storetest.Service("shop", "a", 80)
	for i := range 10 {
		if _, err := st.Apply(ctx, []store.Mutation{{Op: store.OpPut, Object: storetest.Service("shop", "a", int32(80+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Wait(t, 10*time.Second, func() error {
		h, err := st.History(ctx, svc.Key())
		if err != nil {
			return err
		}
		if len(h) != 3 || h[0].Revision != 8 {
			return fmt.Errorf("history has %d entries from revision %d, want 3 from 8", len(h), h[0].Revision)
		}
		return nil
	})
	if _, err := st.Watch(ctx, 2); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch from a compacted revision: %v, want ErrCompacted", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
