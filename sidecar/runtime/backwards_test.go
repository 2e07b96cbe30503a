package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
)

// TestBackwardsRefused: content at a revision lower than the active one is
// NACKed (ErrBackwards) and the active configuration keeps serving, unless it
// comes with a higher rollback epoch (pilot --accept-store-regression); an
// older epoch is refused whatever its revision; the same resources at a lower
// revision are a no-op, not a refusal.
func TestBackwardsRefused(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	ctx := context.Background()
	a, b, c := mesh("127.0.0.1:9001"), mesh("127.0.0.1:9002"), mesh("127.0.0.1:9003")
	step := func(name string, res dt.Resources, o signOpts, wantErr string, wantRev int64) {
		t.Helper()
		err := r.Apply(ctx, e.update(r, res, "v", e.sign(res, o)))
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s: Apply = %v, want accepted", name, err)
		case wantErr != "" && (err == nil || !errors.Is(err, ErrBackwards) || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s: Apply = %v, want ErrBackwards containing %q", name, err, wantErr)
		}
		if got := r.Dump().Active.Revision; got != wantRev {
			t.Fatalf("%s: active revision %d, want %d", name, got, wantRev)
		}
	}
	step("first", a, signOpts{revision: 5}, "", 5)
	step("lower revision", b, signOpts{revision: 4}, "manifest revision 4 is lower than the active revision 5 (rollback epoch 0)", 5)
	step("same resources, lower revision: no-op", a, signOpts{revision: 3}, "", 5)
	step("higher revision", b, signOpts{revision: 6}, "", 6)
	step("lower revision, higher epoch", c, signOpts{revision: 2, epoch: 1}, "", 2)
	step("older epoch, higher revision", a, signOpts{revision: 9}, "manifest rollback epoch 0 is older than the active 1", 2)
	step("same epoch, higher revision", a, signOpts{revision: 3, epoch: 1}, "", 3)
	if n := r.Dump().Counters.Backwards; n != 2 {
		t.Fatalf("Counters.Backwards = %d, want 2", n)
	}
}
