package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/storetest"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
)

// Server limits of the limits cluster: small, so the bounds are quick to reach.
const (
	limitTxnOps   = 16
	limitReqBytes = 64<<10 + RequestOverhead
)

func services(n int, round int32) []store.Mutation {
	muts := make([]store.Mutation, n)
	for i := range muts {
		muts[i] = store.Mutation{Op: store.OpPut, Object: storetest.Service("bulk", fmt.Sprintf("s%04d", i), round)}
	}
	return muts
}

// encodedSize is the size of muts' change set on an empty store.
func encodedSize(t *testing.T, s *Store, muts []store.Mutation) int {
	t.Helper()
	p, err := s.planApply(muts)
	if err != nil {
		t.Fatal(err)
	}
	return len(p.encoded)
}

// keysUnder counts etcd keys under prefix.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) int {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}

// limitsConfig matches the limits cluster.
func limitsConfig(cfg *Config) {
	cfg.MaxTxnOps, cfg.MaxRequestBytes = limitTxnOps, limitReqBytes
	cfg.InlineBytes, cfg.ChunkBytes = 16<<10, 16<<10
}

// TestLimits: every bound of the etcd layout at the bound and one past it,
// against a real cluster run with --max-txn-ops 16 and --max-request-bytes
// 72 KiB.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{MaxTxnOps: limitTxnOps, MaxRequestBytes: limitReqBytes})
	cli := c.Client(t)
	ctx := context.Background()
	open := func(t *testing.T, prefix string, mod ...func(*Config)) *Store {
		t.Helper()
		s := openT(t, c, prefix, append([]func(*Config){limitsConfig}, mod...)...)
		t.Cleanup(func() { s.Close() })
		return s
	}
	muts := services(150, 0) // about 52 KiB encoded

	t.Run("inline at the bound, chunked one past", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			delta  int
			chunks bool
		}{{"at", 0, false}, {"one past", -1, true}} {
			prefix := newPrefix(t)
			n := encodedSize(t, open(t, newPrefix(t)), muts)
			s := open(t, prefix, func(cfg *Config) { cfg.InlineBytes = n + tc.delta })
			if res, err := s.Apply(ctx, muts); err != nil || res.Revision != 1 {
				t.Fatalf("%s: apply of %d bytes: %+v %v", tc.name, n, res.Revision, err)
			}
			if got := keysUnder(t, cli, prefix+"c/") > 0; got != tc.chunks {
				t.Fatalf("%s: change set of %d bytes with InlineBytes %d: chunked %v, want %v", tc.name, n, n+tc.delta, got, tc.chunks)
			}
			other := open(t, prefix)
			objs, rev, err := other.List(ctx, "", "")
			if err != nil || rev != 1 || len(objs) != len(muts) {
				t.Fatalf("%s: another replica lists %d objects at %d (%v)", tc.name, len(objs), rev, err)
			}
		}
	})

	t.Run("inline at the server's request limit", func(t *testing.T) {
		// The largest inline change set the config allows goes through the
		// real server's --max-request-bytes.
		s := open(t, newPrefix(t), func(cfg *Config) { cfg.InlineBytes = limitReqBytes - RequestOverhead })
		n := encodedSize(t, s, muts)
		big := services(200*(limitReqBytes-RequestOverhead)/n, 0)
		for len(big) > 1 && encodedSize(t, s, big) > limitReqBytes-RequestOverhead {
			big = big[:len(big)-1]
		}
		if _, err := s.Apply(ctx, big); err != nil {
			t.Fatalf("inline apply of %d bytes (bound %d): %v", encodedSize(t, s, big), limitReqBytes-RequestOverhead, err)
		}
	})

	t.Run("chunks at the bound and one past", func(t *testing.T) {
		n := encodedSize(t, open(t, newPrefix(t)), muts)
		maxChunks := limitTxnOps - 3
		for _, tc := range []struct {
			chunks int
			ok     bool
		}{{maxChunks, true}, {maxChunks + 1, false}} {
			size := (n + tc.chunks - 1) / tc.chunks
			if got := (n + size - 1) / size; got != tc.chunks {
				t.Fatalf("%d bytes in pieces of %d make %d chunks, want %d", n, size, got, tc.chunks)
			}
			prefix := newPrefix(t)
			s := open(t, prefix, func(cfg *Config) { cfg.InlineBytes, cfg.ChunkBytes = 1, size })
			_, err := s.Apply(ctx, muts)
			if tc.ok {
				if err != nil {
					t.Fatalf("%d chunks (%d + 3 ops, server --max-txn-ops %d): %v", tc.chunks, tc.chunks, limitTxnOps, err)
				}
				continue
			}
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%d chunks of %d bytes, but one etcd transaction (--max-txn-ops %d) commits at most %d", tc.chunks, size, limitTxnOps, maxChunks)) {
				t.Fatalf("%d chunks: error %v, want ErrInvalid naming the bound", tc.chunks, err)
			}
			if keysUnder(t, cli, prefix) != 1 { // only the id
				t.Fatalf("refused apply left %d keys", keysUnder(t, cli, prefix))
			}
		}
	})

	t.Run("server refuses a commit past its --max-txn-ops", func(t *testing.T) {
		// Misconfigured: the store believes the server allows more. etcd refuses
		// the commit; the apply fails at once (no retry loop), nothing committed.
		n := encodedSize(t, open(t, newPrefix(t)), muts)
		size := (n + limitTxnOps - 3) / (limitTxnOps - 2) // limitTxnOps-2 chunks: one op too many
		prefix := newPrefix(t)
		s := open(t, prefix, func(cfg *Config) { cfg.InlineBytes, cfg.ChunkBytes, cfg.MaxTxnOps = 1, size, limitTxnOps+1 })
		_, err := s.Apply(ctx, muts)
		if err == nil || !strings.Contains(err.Error(), "refused by etcd") || !strings.Contains(err.Error(), "too many operations") {
			t.Fatalf("apply past the server's --max-txn-ops: %v", err)
		}
		if r, err := s.Revision(ctx); err != nil || r != 0 {
			t.Fatalf("revision %d (%v) after a refused commit, want 0", r, err)
		}
	})

	t.Run("chunk size at the request limit and one past", func(t *testing.T) {
		at := limitReqBytes - RequestOverhead
		s := open(t, newPrefix(t), func(cfg *Config) { cfg.InlineBytes, cfg.ChunkBytes = 1, at })
		big := services(600, 1) // about 3 chunks of 64 KiB
		if _, err := s.Apply(ctx, big); err != nil {
			t.Fatalf("chunks of %d bytes through --max-request-bytes %d: %v", at, limitReqBytes, err)
		}
		_, err := Open(ctx, Config{Endpoints: c.Endpoints, MaxRequestBytes: limitReqBytes, InlineBytes: 1, ChunkBytes: at + 1})
		if want := fmt.Sprintf("etcdstore: chunk bytes %d must be in 1..max request bytes %d - %d", at+1, limitReqBytes, RequestOverhead); err == nil || err.Error() != want {
			t.Fatalf("Open with chunks one past: %v, want %q", err, want)
		}
		// Misconfigured: chunks past what the server takes fail the apply at once.
		prefix := newPrefix(t)
		s = open(t, prefix, func(cfg *Config) {
			cfg.MaxRequestBytes, cfg.InlineBytes, cfg.ChunkBytes = 4*limitReqBytes, 1, 2*limitReqBytes
		})
		if _, err := s.Apply(ctx, big); err == nil || !strings.Contains(err.Error(), "request is too large") {
			t.Fatalf("chunks past the server's limit: %v", err)
		}
		if r, err := s.Revision(ctx); err != nil || r != 0 {
			t.Fatalf("revision %d (%v) after a refused chunk, want 0", r, err)
		}
	})

	t.Run("chunks expired before the commit", func(t *testing.T) {
		// The lease bounds staging + commit: a commit after it expired fails
		// and writes nothing. etcd raises short TTLs to its minimum (1.5
		// election timeouts), so this waits about 6s.
		prefix := newPrefix(t)
		s := open(t, prefix, func(cfg *Config) { cfg.InlineBytes, cfg.ChunkLeaseTTL = 1, time.Second })
		s.beforeCommit = func(id string) {
			testkit.Wait(t, 30*time.Second, func() error {
				if n := keysUnder(t, cli, s.k.chunkDir(id)); n > 0 {
					return fmt.Errorf("%d chunks still under their lease", n)
				}
				return nil
			})
		}
		_, err := s.Apply(ctx, muts)
		if err == nil || !strings.Contains(err.Error(), "refused by etcd") {
			t.Fatalf("commit after the chunks expired: %v, want a refusal", err)
		}
		s.beforeCommit = nil
		if r, err := s.Revision(ctx); err != nil || r != 0 {
			t.Fatalf("revision %d (%v) after the expired commit, want 0", r, err)
		}
		if _, err := s.Apply(ctx, muts); err != nil { // within the TTL it commits
			t.Fatalf("apply within the lease: %v", err)
		}
	})

	t.Run("commit attempts at the bound and one past", func(t *testing.T) {
		for _, tc := range []struct {
			lost int
			ok   bool
		}{{MaxCommitAttempts - 1, true}, {MaxCommitAttempts, false}} {
			prefix := newPrefix(t)
			s, other := open(t, prefix), open(t, prefix)
			calls := 0
			// Before each of our commits another replica commits first.
			s.beforeCommit = func(string) {
				if calls++; calls <= tc.lost {
					if _, err := other.Apply(ctx, services(1, int32(calls))); err != nil {
						t.Errorf("other replica: %v", err)
					}
				}
			}
			res, err := s.Apply(ctx, services(2, 0)[1:])
			if tc.ok {
				if err != nil || res.Revision != store.Revision(tc.lost+1) {
					t.Fatalf("after losing %d races: revision %d, %v; want %d", tc.lost, res.Revision, err, tc.lost+1)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("other replicas committed first %d times", MaxCommitAttempts)) {
				t.Fatalf("after losing %d races: %v", tc.lost, err)
			}
		}
	})
}

// TestApplyTimeout: with quorum, an apply finishes well within ApplyTimeout;
// without quorum (two of three members killed) it fails at ApplyTimeout with
// the deadline named. Its outcome is then unknown, as etcd's is: once quorum
// returns the apply is there whole or not at all.
func TestApplyTimeout(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	const bound = 3 * time.Second
	s := openT(t, c, newPrefix(t), func(cfg *Config) { cfg.ApplyTimeout = bound })
	defer s.Close()
	start := time.Now()
	if _, err := s.Apply(ctx, services(10, 0)); err != nil {
		t.Fatalf("apply with quorum: %v", err)
	}
	if d := time.Since(start); d >= bound {
		t.Fatalf("apply with quorum took %s, bound %s", d, bound)
	}
	for _, m := range c.Members[1:] {
		m.Kill(t)
	}
	start = time.Now()
	_, err := s.Apply(ctx, services(10, 1))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("apply without quorum: %v, want a deadline", err)
	}
	if took < bound || took > bound+5*time.Second {
		t.Fatalf("apply without quorum failed after %s, want about %s", took, bound)
	}
	for _, m := range c.Members[1:] {
		c.Restart(t, m)
	}
	r, err := s.Revision(ctx)
	if err != nil || r < 1 || r > 2 {
		t.Fatalf("revision %d (%v) after the timed-out apply, want 1 or 2", r, err)
	}
	objs, _, err := s.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Metadata.Revision != int64(r) {
			t.Fatalf("at revision %d, %s is at revision %d: the apply is not whole", r, o, o.Metadata.Revision)
		}
	}
	t.Logf("the timed-out apply is %s", map[bool]string{true: "committed (whole)", false: "absent"}[r == 2])
}
