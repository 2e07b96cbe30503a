package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/etcdtest"
)

// remoteIDs is what r holds of the other replicas, as "replica/id=value", sorted.
func remoteIDs(r *Registrations) string {
	var out []string
	for _, e := range r.Remote() {
		out = append(out, e.Replica+"/"+e.ID+"="+string(e.Value))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func waitRemote(t *testing.T, r *Registrations, want string) {
	t.Helper()
	testkit.Wait(t, 10*time.Second, func() error {
		if got := remoteIDs(r); got != want {
			return fmt.Errorf("remote registrations %q, want %q", got, want)
		}
		return nil
	})
}

// TestRegistrations: replicas see each other's registrations (not their own),
// a Delete and a clean Close take them out at once, a replica that stops
// keeping its lease alive (as a killed one) loses them within the TTL, and
// the bounds hold at the bound and one past, on both the writing and the
// reading side.
func TestRegistrations(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	prefix := newPrefix(t)
	a, b := openT(t, c, prefix), openT(t, c, prefix)
	defer b.Close()
	defer a.Close()
	lim := RegistrationLimits{MaxEntries: 3, MaxEntryBytes: 16}
	for _, bad := range []struct {
		replica string
		ttl     time.Duration
		lim     RegistrationLimits
	}{{"", MinReplicaTTL, lim}, {"a/b", MinReplicaTTL, lim}, {"a", MinReplicaTTL - time.Millisecond, lim}, {"a", MinReplicaTTL, RegistrationLimits{MaxEntries: -1}}} {
		if _, err := a.ShareRegistrations(ctx, bad.replica, bad.ttl, bad.lim); err == nil {
			t.Errorf("ShareRegistrations(%q, %v, %+v) accepted", bad.replica, bad.ttl, bad.lim)
		}
	}
	ra, err := a.ShareRegistrations(ctx, "ra", MinReplicaTTL, lim)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.ShareRegistrations(ctx, "rb", MinReplicaTTL, lim)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ra.Put(fmt.Sprintf("n%d", i), []byte("v")); err != nil {
			t.Fatalf("registration %d of at most 3: %v", i+1, err)
		}
	}
	if err := ra.Put("n3", []byte("v")); !errors.Is(err, ErrTooManyRegistrations) {
		t.Fatalf("4th registration of at most 3: %v, want ErrTooManyRegistrations", err)
	}
	if err := ra.Put("n0", []byte(strings.Repeat("x", 16))); err != nil {
		t.Fatalf("16-byte registration (the bound) replacing one: %v", err)
	}
	if err := ra.Put("n1", []byte(strings.Repeat("x", 17))); err == nil {
		t.Fatal("17-byte registration (one past the bound) accepted")
	}
	for _, bad := range []string{"", "a/b"} {
		if err := ra.Put(bad, []byte("v")); err == nil {
			t.Errorf("registration id %q accepted", bad)
		}
	}
	if err := rb.Put("m0", []byte("w")); err != nil {
		t.Fatal(err)
	}
	waitRemote(t, rb, "ra/n0="+strings.Repeat("x", 16)+" ra/n1=v ra/n2=v")
	waitRemote(t, ra, "rb/m0=w")
	ra.Delete("n1")
	waitRemote(t, rb, "ra/n0="+strings.Repeat("x", 16)+" ra/n2=v")

	// The reading side holds the same bounds against keys it did not write.
	raw := a.cli
	for i := range 4 {
		if _, err := raw.Put(ctx, prefix+"registrations/hand/h"+fmt.Sprint(i), "h"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Put(ctx, prefix+"registrations/big/b", strings.Repeat("y", 17)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, prefix+"registrations/big/ok", strings.Repeat("y", 16)); err != nil {
		t.Fatal(err)
	}
	waitRemote(t, ra, "big/ok="+strings.Repeat("y", 16)+" hand/h0=h hand/h1=h hand/h2=h rb/m0=w")
	if _, err := raw.Delete(ctx, prefix+"registrations/hand/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, prefix+"registrations/big/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}

	// A replica killed: its lease is no longer kept alive and expires.
	lease, err := raw.Grant(ctx, int64(MinReplicaTTL/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, prefix+"registrations/killed/k", "k", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waitRemote(t, rb, "killed/k=k ra/n0="+strings.Repeat("x", 16)+" ra/n2=v")
	put := time.Now()
	waitRemote(t, rb, "ra/n0="+strings.Repeat("x", 16)+" ra/n2=v")
	// etcd may hold a lease up to about 1.5 election timeouts past its TTL
	// (a leader change extends it); the bound asserted is TTL plus that.
	if gone, bound := time.Since(put), MinReplicaTTL+2*etcdtest.ElectionTimeout; gone > bound {
		t.Errorf("a killed replica's registration outlived its lease by %v (TTL %v), want within %v", gone, MinReplicaTTL, bound)
	}

	// Kept alive past several TTLs while the replica runs.
	deadline := time.Now().Add(2 * MinReplicaTTL)
	testkit.Eventually(t, 30*time.Second, "two TTLs pass with a's registrations alive", func() bool {
		if got := remoteIDs(rb); got != "ra/n0="+strings.Repeat("x", 16)+" ra/n2=v" {
			t.Fatalf("registrations of a running replica changed: %q", got)
		}
		return time.Now().After(deadline)
	})
	// A clean Close revokes the lease: gone at once.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitRemote(t, rb, "")
}
