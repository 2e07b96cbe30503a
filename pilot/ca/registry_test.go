package ca

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/weft-mesh/weft/certs/revoke"
	"github.com/weft-mesh/weft/certs/token"
)

var r0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func entry(serial int64, id string, notBefore, notAfter time.Time, issuer string) *Issued {
	return &Issued{Serial: big.NewInt(serial), ID: spiffeid.RequireFromString(id), NotBefore: notBefore, NotAfter: notAfter, Issuer: issuer}
}

func TestRegistryBoundAndDrop(t *testing.T) {
	r := newRegistry(2)
	a := entry(1, reviews, r0, r0.Add(time.Hour), "root")
	b := entry(2, reviews, r0, r0.Add(2*time.Hour), "root")
	c := entry(3, reviews, r0, r0.Add(3*time.Hour), "root")
	steps := []struct {
		e    *Issued
		now  time.Time
		err  string
		left []int64
	}{
		{a, r0, "", []int64{1}},
		{b, r0, "", []int64{1, 2}},
		{c, r0, "issued registry full: 2 unexpired certificates (--max-issued 2)", []int64{1, 2}},   // one past the bound
		{c, r0.Add(time.Hour), "issued registry full", []int64{1, 2}},                               // a expires after, not at, NotAfter
		{c, r0.Add(time.Hour + time.Nanosecond), "", []int64{2, 3}},                                 // the expired one made room
		{entry(4, reviews, r0, r0.Add(time.Hour), "root"), r0.Add(3*time.Hour + 1), "", []int64{4}}, // every expired one went
	}
	for i, st := range steps {
		err := r.add(st.e, st.now)
		if st.err == "" && err != nil || st.err != "" && (err == nil || !strings.Contains(err.Error(), st.err) || !errors.Is(err, ErrRegistryFull)) {
			t.Fatalf("step %d: err %v, want %q", i, err, st.err)
		}
		var got []int64
		for _, e := range r.sortedIssued() {
			got = append(got, e.Serial.Int64())
		}
		if len(got) != len(st.left) {
			t.Fatalf("step %d: entries %v, want %v", i, got, st.left)
		}
		for j := range got {
			if got[j] != st.left[j] {
				t.Fatalf("step %d: entries %v, want %v", i, got, st.left)
			}
		}
	}
}

func TestRegistryRevocations(t *testing.T) {
	r := newRegistry(10)
	_ = r.add(entry(1, reviews, r0, r0.Add(time.Hour), "old"), r0)
	_ = r.add(entry(2, reviews, r0.Add(time.Minute), r0.Add(2*time.Hour), "new"), r0)
	_ = r.add(entry(3, "spiffe://cluster.local/ns/shop/sa/other", r0, r0.Add(time.Hour), "old"), r0)
	if n := r.liveFrom("old", r0); n != 2 {
		t.Fatalf("liveFrom(old) = %d, want 2", n)
	}

	v, added, err := r.revokeSerial(big.NewInt(1), 1, r0, time.Hour)
	if err != nil || !added || v.ID != reviews || !v.NotAfter.Equal(r0.Add(time.Hour)) {
		t.Fatalf("revoke known serial: %+v %v %v", v, added, err)
	}
	if _, added, _ := r.revokeSerial(big.NewInt(1), 4, r0, time.Hour); added {
		t.Fatal("revoking twice added an entry")
	}
	unknown, _, _ := r.revokeSerial(big.NewInt(99), 0, r0, 5*time.Hour)
	if unknown.ID != "" || !unknown.NotAfter.Equal(r0.Add(5*time.Hour)) {
		t.Fatalf("unknown serial kept until %v, want now+unknownTTL", unknown.NotAfter)
	}
	if n := r.liveFrom("old", r0); n != 1 {
		t.Fatalf("liveFrom(old) after revoking 1 = %d, want 1 (revoked ones do not count)", n)
	}

	revs, err := r.revokeID(spiffeid.RequireFromString(reviews), 0, r0.Add(10*time.Minute))
	if err != nil || len(revs) != 1 || revs[0].Serial.Int64() != 2 {
		t.Fatalf("revokeID: %+v %v (want only serial 2 newly revoked)", revs, err)
	}
	id := spiffeid.RequireFromString(reviews)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{r0, true}, {r0.Add(10 * time.Minute), true}, {r0.Add(10*time.Minute + time.Nanosecond), false},
	} {
		if _, got := r.idRevokedSince(id, tc.at); got != tc.want {
			t.Errorf("idRevokedSince(%v) = %v, want %v", tc.at.Sub(r0), got, tc.want)
		}
	}
	if got := r.crlEntries(); len(got) != 3 || got[0].Serial.Int64() != 1 || got[2].Serial.Int64() != 99 {
		t.Fatalf("crlEntries %v, want serials 1, 2, 99 in order", got)
	}

	// prune: a revocation is listed up to and at its certificate's NotAfter.
	if r.prune(r0.Add(time.Hour)) || len(r.revoked) != 3 {
		t.Fatal("pruned at NotAfter")
	}
	if !r.prune(r0.Add(time.Hour+time.Nanosecond)) || r.isRevoked(big.NewInt(1)) || !r.isRevoked(big.NewInt(2)) {
		t.Fatal("serial 1 not pruned past its NotAfter, or serial 2 pruned early")
	}
	// An ID revocation outlives every token that could predate it, then goes.
	keep := r0.Add(10*time.Minute + token.MaxTTL + token.Leeway)
	r.prune(keep)
	if _, ok := r.ids[id]; !ok {
		t.Fatal("ID revocation dropped while an older token could still be valid")
	}
	r.prune(keep.Add(time.Nanosecond))
	if _, ok := r.ids[id]; ok {
		t.Fatal("ID revocation kept past every older token's expiry")
	}
}

func TestRevocationBound(t *testing.T) {
	r := newRegistry(1)
	for i := range revoke.MaxEntries {
		r.revoked[serialKey(big.NewInt(int64(i+1)))] = Revocation{Serial: big.NewInt(int64(i + 1)), NotAfter: r0.Add(time.Hour)}
	}
	_, _, err := r.revokeSerial(big.NewInt(1<<40), 0, r0, time.Hour)
	if !errors.Is(err, ErrTooManyRevocations) || !strings.Contains(err.Error(), "100000 serials revoked (bound 100000)") {
		t.Fatalf("one past the bound: %v", err)
	}
	// Once the listed certificates expire there is room again.
	if _, added, err := r.revokeSerial(big.NewInt(1<<40), 0, r0.Add(2*time.Hour), time.Hour); err != nil || !added {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestParseSerialAndReason(t *testing.T) {
	for in, want := range map[string]string{"3f1c": "3f1c", "3F:1C": "3f1c", "0x3f1c": "3f1c", " 3f1c ": "3f1c"} {
		if n, err := ParseSerial(in); err != nil || serialKey(n) != want {
			t.Errorf("ParseSerial(%q) = %v %v", in, n, err)
		}
	}
	for _, in := range []string{"", "0", "xyz", "-1", strings.Repeat("f", 41)} {
		if _, err := ParseSerial(in); err == nil {
			t.Errorf("ParseSerial(%q) accepted", in)
		}
	}
	if _, err := ParseSerial(strings.Repeat("f", 40)); err != nil {
		t.Errorf("a 20-byte serial: %v", err)
	}
	for in, want := range map[string]int{"": 0, "keyCompromise": 1, "superseded": 4, "aACompromise": 10} {
		if got, err := ParseReason(in); err != nil || got != want {
			t.Errorf("ParseReason(%q) = %d %v", in, got, err)
		}
	}
	if _, err := ParseReason("certificateHold"); err == nil {
		t.Error("certificateHold accepted (a hold can be lifted; a revocation cannot)")
	}
}
