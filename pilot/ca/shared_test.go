package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"math"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/certs/csrrpc"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/internal/edkey"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/certfiles"
)

// replicaPair is two CA services, each with its own data directory, sharing
// a root, the token and publisher keys, and one real boltstore for their
// revocations; both run (so each follows the set).
func replicaPair(t *testing.T) (a, b *Service, st *boltstore.Store) {
	t.Helper()
	root := certfiles.NewCA(t, "cluster.local")
	keys := t.TempDir()
	tokenKey, publisherKey := filepath.Join(keys, "token.key"), filepath.Join(keys, "publisher.key")
	for _, f := range []string{tokenKey, publisherKey} {
		if _, _, err := edkey.LoadOrCreate(f, "test key"); err != nil {
			t.Fatal(err)
		}
	}
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	shared := func(c *ServiceConfig) {
		c.RootCertFile, c.RootKeyFile = root.RootCertFile, root.RootKeyFile
		c.TokenKeyFile, c.PublisherKeyFile = tokenKey, publisherKey
		c.Revocations, c.SharedPoll = st, MinSharedPoll
	}
	a, b = newService(t, t.TempDir(), shared), newService(t, t.TempDir(), shared)
	for _, s := range []*Service{a, b} {
		c, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(c) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	return a, b, st
}

func issueFor(t *testing.T, s *Service, w *workload, id string) []*x509.Certificate {
	t.Helper()
	chain, err := s.issue(func() ([]*x509.Certificate, error) {
		return s.CA().Sign(mustCSR(t, w.csr(t, id)), spiffeid.RequireFromString(id), time.Hour)
	}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	return chain
}

// TestSharedRevocationSerial: a certificate replica a issued, revoked through
// replica b (which never saw it), is in a's CRL within the poll, a refuses
// its renewal, and both CRLs of one set revision list the same serials.
func TestSharedRevocationSerial(t *testing.T) {
	a, b, st := replicaPair(t)
	w := newWorkload(t)
	chain := issueFor(t, a, w, reviews)
	serial := chain[0].SerialNumber
	start := time.Now()
	revs, number, err := b.Revoke(serialKey(serial), "", "keyCompromise")
	if err != nil || len(revs) != 1 {
		t.Fatalf("revoke through b: %v %v", revs, err)
	}
	if !b.CRL().Revoked(serial) || b.CRL().Number() != number {
		t.Fatal("b's own CRL does not list what it just revoked")
	}
	setRev, err := st.SetRevision(context.Background(), RevocationSet)
	if err != nil || number>>32 != int64(setRev) {
		t.Fatalf("CRL number %d: high bits %d, want the set revision %d (%v)", number, number>>32, setRev, err)
	}
	testkit.Eventually(t, 5*time.Second, "a's CRL lists the serial revoked through b", func() bool { return a.CRL().Revoked(serial) })
	took := time.Since(start)
	if bound := MinSharedPoll + time.Second; took > bound {
		t.Errorf("a listed it after %v, over poll+1s = %v", took, bound)
	}
	t.Logf("revoked through b, listed by a after %v (poll %v)", took, MinSharedPoll)
	if a.CRL().Number()>>32 != number>>32 {
		t.Errorf("a's CRL %d and b's %d are of different set revisions", a.CRL().Number(), number)
	}
	// a refuses the revoked certificate's renewal, as its own revocation.
	_, err = csrrpc.Sign(ctx(t), dial(t, a, serveTLS(t, a), chain, w.key), w.csr(t, reviews), "")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("renewal at a with the certificate revoked through b: %v", err)
	}
	for _, c := range a.Certificates() {
		if c.Serial == serialKey(serial) && c.State != StateRevoked {
			t.Errorf("a's registry shows %s as %s", c.Serial, c.State)
		}
	}
}

// TestSharedRevocationID: a SPIFFE ID revoked through b, which issued none of
// its certificates: a refuses the ID's old tokens and adds the serials it
// issued to the set, so b lists them too.
func TestSharedRevocationID(t *testing.T) {
	a, b, _ := replicaPair(t)
	tok, _, err := a.IssueToken("shop", "reviews", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	chain := issueFor(t, a, newWorkload(t), reviews)
	if _, _, err := b.Revoke("", reviews, ""); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "b's CRL lists a's certificate of the revoked ID", func() bool { return b.CRL().Revoked(chain[0].SerialNumber) })
	// a writes the serial to the set before it signs its own CRL with it.
	testkit.Eventually(t, 5*time.Second, "a's CRL lists its certificate of the ID revoked through b", func() bool { return a.CRL().Revoked(chain[0].SerialNumber) })
	_, err = csrrpc.Sign(ctx(t), dial(t, a, serveTLS(t, a), nil, nil), newWorkload(t).csr(t, reviews), tok)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("token issued before the ID's revocation through b, at a: %v", err)
	}
}

// TestSharedRevocationFailsClosed: with the store gone, a revocation is not
// acknowledged and no CRL is signed from a set that could not be read.
func TestSharedRevocationFailsClosed(t *testing.T) {
	a, _, st := replicaPair(t)
	chain := issueFor(t, a, newWorkload(t), reviews)
	before := a.CRL()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Revoke(serialKey(chain[0].SerialNumber), "", ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("revoke with the store closed: %v, want it refused (store.ErrClosed)", err)
	}
	if err := a.publishCRL(); err == nil || !strings.Contains(err.Error(), "shared revocations") {
		t.Fatalf("CRL re-sign with the store closed: %v, want an error", err)
	}
	if a.CRL() != before {
		t.Fatal("a CRL was published without reading the shared set")
	}
}

// TestSharingJoinsOwnRevocations: a pilot that revoked on its own before it
// shared adds those revocations to the set at start.
func TestSharingJoinsOwnRevocations(t *testing.T) {
	dir := t.TempDir()
	s := newService(t, dir, nil)
	chain := issueFor(t, s, newWorkload(t), reviews)
	if _, _, err := s.Revoke(serialKey(chain[0].SerialNumber), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Revoke("", "spiffe://cluster.local/ns/shop/sa/old", ""); err != nil {
		t.Fatal(err)
	}
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newService(t, dir, func(c *ServiceConfig) { c.Revocations = st })
	if !r.CRL().Revoked(chain[0].SerialNumber) {
		t.Fatal("the revocation of the file is not in the shared CRL")
	}
	recs, _, err := st.SetList(context.Background(), RevocationSet)
	if err != nil || len(recs) != 2 {
		t.Fatalf("set: %v %v, want the serial and the ID", recs, err)
	}
}

func TestCRLNumberFor(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		rev     store.Revision
		now     time.Time
		want    int64
		wantErr bool
	}{
		{0, at, 1_800_000_000, false},
		{1, at, 1<<32 | 1_800_000_000, false},
		{math.MaxInt32, at, math.MaxInt32<<32 | 1_800_000_000, false},
		{math.MaxInt32 + 1, at, 0, true}, // one past the bound
		{-1, at, 0, true},
		{1, time.Unix(math.MaxUint32, 0), 1<<32 | math.MaxUint32, false},
		{1, time.Unix(math.MaxUint32+1, 0), 0, true},
	} {
		got, err := crlNumberFor(c.rev, c.now)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("crlNumberFor(%d, %d) = %d, %v; want %d (error %v)", c.rev, c.now.Unix(), got, err, c.want, c.wantErr)
		}
	}
	// A later set revision outranks any time; a later second, the same revision.
	n1, _ := crlNumberFor(5, at.Add(time.Hour))
	n2, _ := crlNumberFor(6, at)
	n3, _ := crlNumberFor(6, at.Add(time.Second))
	if !(n1 < n2 && n2 < n3) {
		t.Errorf("not monotonic: %d %d %d", n1, n2, n3)
	}
}

func TestDecodeSet(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UTC()
	id := spiffeid.RequireFromString(reviews)
	v := Revocation{Serial: mustSerial(t, "ab"), ID: reviews, RevokedAt: now, Reason: 1, NotAfter: now.Add(time.Hour)}
	sr, _ := serialRecord(v)
	ir, _ := idRecord(id, now)
	revoked, ids, err := decodeSet([]store.SetRecord{sr, ir})
	if err != nil || len(revoked) != 1 || revoked["ab"].Reason != 1 || !ids[id].Equal(now) {
		t.Fatalf("decode: %v %v %v", revoked, ids, err)
	}
	for name, recs := range map[string][]store.SetRecord{
		"unknown kind":    {{Name: "other/x", Value: []byte("{}")}},
		"bad json":        {{Name: "serial/ab", Value: []byte("{")}},
		"name and serial": {{Name: "serial/cd", Value: sr.Value}},
		"bad serial":      {{Name: "serial/zz", Value: []byte(`{"serial":"zz"}`)}},
		"bad spiffe id":   {{Name: "id/x", Value: []byte(`{"spiffeId":"http://x"}`)}},
	} {
		if _, _, err := decodeSet(recs); err == nil || !strings.Contains(err.Error(), RevocationSet) {
			t.Errorf("%s: %v, want an error naming the set", name, err)
		}
	}
	if got := expiredRecords(revoked, ids, now); len(got) != 0 {
		t.Errorf("nothing expired yet: %v", got)
	}
	if got := expiredRecords(revoked, ids, now.Add(time.Hour+time.Second)); len(got) != 1 || got[0] != "serial/ab" {
		t.Errorf("past the certificate's NotAfter: %v", got)
	}
	if got := expiredRecords(revoked, ids, now.Add(token.MaxTTL+token.Leeway+time.Second)); len(got) != 2 {
		t.Errorf("past every token the ID could have: %v", got)
	}
}

func mustSerial(t *testing.T, s string) *big.Int {
	t.Helper()
	n, err := ParseSerial(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSharedPollBounds: SharedPoll at each bound is taken, one past is refused.
func TestSharedPollBounds(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		poll time.Duration
		ok   bool
	}{{MinSharedPoll, true}, {MinSharedPoll - 1, false}, {MaxSharedPoll, true}, {MaxSharedPoll + 1, false}, {0, true}} {
		_, err := New(ServiceConfig{DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), Revocations: st, SharedPoll: c.poll})
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "SharedPoll")) {
			t.Errorf("SharedPoll %v: %v, want ok=%v", c.poll, err, c.ok)
		}
	}
}
