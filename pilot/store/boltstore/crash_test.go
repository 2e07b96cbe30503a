package boltstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
)

const (
	crashDirEnv   = "WEFT_BOLTSTORE_CRASH_DIR"
	crashObjects  = 50 // objects rewritten by every apply of the child
	crashRounds   = 12
	crashRoundsSh = 4
)

// crashRound builds one bulk apply: every object carries the round number, so a
// store caught between two revisions would show mixed rounds.
func crashRound(round int) []store.Mutation {
	muts := make([]store.Mutation, crashObjects)
	for i := range muts {
		o := storetest.Service("default", fmt.Sprintf("s%02d", i), int32(round%1000))
		o.Metadata.Labels["round"] = strconv.Itoa(round)
		muts[i] = store.Mutation{Op: store.OpPut, Object: o}
	}
	return muts
}

// TestCrashChild is the process the crash test kills; it only runs when started
// by TestKill9MidApply. It prints each committed revision.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKill9MidApply")
	}
	s, err := Open(dir)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	rev, _ := s.Revision(context.Background())
	for round := int(rev) + 1; ; round++ {
		res, err := s.Apply(context.Background(), crashRound(round))
		if err != nil {
			fmt.Println("apply:", err)
			os.Exit(2)
		}
		fmt.Println(res.Revision)
	}
}

// TestKill9MidApply kills a process applying 50-object revisions in a loop at
// random moments and checks the store it leaves: exactly one whole revision, never
// a mix, and never older than a revision the process saw committed.
func TestKill9MidApply(t *testing.T) {
	rounds := crashRounds
	if testing.Short() {
		rounds = crashRoundsSh
	}
	dir := t.TempDir()
	inFlight := 0 // kills after which the unacknowledged apply had committed
	for i := range rounds {
		acked := runAndKill(t, dir)
		s, err := Open(dir, WithLockTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", i, err)
		}
		if checkCrashState(t, s, acked) {
			inFlight++
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	t.Logf("%d kills: %d left the in-flight revision committed but unacknowledged", rounds, inFlight)
}

// runAndKill starts the child, waits for its first commit, kills it with SIGKILL
// after a random delay and returns the last revision it reported committed.
func runAndKill(t *testing.T, dir string) store.Revision {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	revs := make(chan store.Revision, 1024)
	go func() {
		defer close(revs)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if r, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				revs <- store.Revision(r)
			}
		}
	}()
	var acked store.Revision
	select {
	case r, ok := <-revs:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("child exited before its first commit")
		}
		acked = r
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("child made no commit within 30s")
	}
	// The kill lands at a random point of the apply loop, not a synchronisation.
	time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	_ = cmd.Wait() // exits by SIGKILL; its error says so
	for r := range revs {
		acked = r
	}
	return acked
}

// checkCrashState reports whether the store holds one revision more than the
// child acknowledged (killed between commit and print).
func checkCrashState(t *testing.T, s *Store, acked store.Revision) bool {
	t.Helper()
	ctx := context.Background()
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	if rev < acked || rev > acked+1 {
		t.Fatalf("store at revision %d, child last acknowledged %d: want that or the one in flight", rev, acked)
	}
	objs, listRev, err := s.List(ctx, resource.KindService, "default")
	if err != nil || listRev != rev {
		t.Fatalf("List: revision %d error %v", listRev, err)
	}
	if len(objs) != crashObjects {
		t.Fatalf("%d objects after kill, want %d", len(objs), crashObjects)
	}
	for _, o := range objs {
		if o.Metadata.Revision != int64(rev) || o.Metadata.Labels["round"] != strconv.Itoa(int(rev)) {
			t.Fatalf("%s at revision %d round %s, store at %d: torn apply", o, o.Metadata.Revision, o.Metadata.Labels["round"], rev)
		}
	}
	h, err := s.History(ctx, objs[0].Key())
	if err != nil || store.Revision(len(h)) != rev || h[len(h)-1].Revision != rev {
		t.Fatalf("history of %s: %d entries, error %v; want %d ending at %d", objs[0], len(h), err, rev, rev)
	}
	return rev == acked+1
}
