package outlieragg

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/internal/outlierreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const svc = "outbound|9080||reviews.shop.svc.cluster.local"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func report(node string, es ...outlierreport.Entry) *outlierreport.Report {
	return &outlierreport.Report{Node: node, Total: uint32(len(es)), Entries: es}
}

func ej(ep string, d outlierreport.Detector, age time.Duration, times uint32) outlierreport.Entry {
	return outlierreport.Entry{Service: svc, Endpoint: ep, Detector: d, Age: age, Times: times}
}

func mustNew(t *testing.T, l Limits) *Aggregate {
	t.Helper()
	a, err := New(l)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func holdsAll(node, service string) bool { return true }

// One table, line by line: each step acts at its time and the view after it is
// what it says.
func TestAggregate(t *testing.T) {
	a := mustNew(t, DefaultLimits())
	type view struct{ EjectedBy, Clients int }
	for i, st := range []struct {
		now   float64
		do    func() error
		want  map[string]view // endpoint -> counts; endpoints not listed are not ejected
		since map[string]time.Time
		errIs error
	}{
		{now: 0, do: func() error {
			return a.Put("a", 1, report("a", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 2*time.Second, 1)), at(0))
		},
			want: map[string]view{"10.0.0.3:9080": {1, 1}}, since: map[string]time.Time{"10.0.0.3:9080": at(-2)}},
		// b reports nothing ejected: it is a client of the service, not an ejector.
		{now: 1, do: func() error { return a.Put("b", 2, report("b"), at(1)) },
			want: map[string]view{"10.0.0.3:9080": {1, 2}}},
		{now: 2, do: func() error {
			return a.Put("c", 3, report("c", ej("10.0.0.3:9080", outlierreport.SuccessRate, 10*time.Second, 2), ej("10.0.0.4:9080", outlierreport.Consecutive5xx, 0, 1)), at(2))
		}, want: map[string]view{"10.0.0.3:9080": {2, 3}, "10.0.0.4:9080": {1, 3}}, since: map[string]time.Time{"10.0.0.3:9080": at(-8)}},
		// a refreshes the same episode: its since stays at its first value.
		{now: 3, do: func() error {
			return a.Put("a", 1, report("a", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 2900*time.Millisecond, 1)), at(3))
		},
			want: map[string]view{"10.0.0.3:9080": {2, 3}, "10.0.0.4:9080": {1, 3}}},
		// c's stream ends: its entries vanish; b is still a client.
		{now: 4, do: func() error { a.Drop("c", 3); return nil }, want: map[string]view{"10.0.0.3:9080": {1, 2}}},
		// Dropping with another stream's id leaves a's report.
		{now: 5, do: func() error { a.Drop("a", 99); return nil }, want: map[string]view{"10.0.0.3:9080": {1, 2}}},
		// b's report expires at exactly TTL after it came: a is the only client.
		{now: 1 + outlierreport.TTL.Seconds() - 0.001, do: func() error { return nil }, want: map[string]view{"10.0.0.3:9080": {1, 2}}},
		{now: 1 + outlierreport.TTL.Seconds(), do: func() error { return nil }, want: map[string]view{"10.0.0.3:9080": {1, 1}}},
		{now: 3 + outlierreport.TTL.Seconds(), do: func() error { return nil }, want: map[string]view{}},
	} {
		err := st.do()
		if !errors.Is(err, st.errIs) {
			t.Fatalf("step %d: %v, want %v", i, err, st.errIs)
		}
		v := a.View(at(st.now), holdsAll)
		got := map[string]view{}
		for _, ep := range v.Endpoints {
			got[ep.Endpoint] = view{ep.EjectedBy, ep.Clients}
			if s, ok := st.since[ep.Endpoint]; ok && !ep.Since.Equal(s) {
				t.Errorf("step %d: %s since %v, want %v", i, ep.Endpoint, ep.Since, s)
			}
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("step %d (t=%v): (-want +got)\n%s", i, st.now, diff)
		}
	}
	if a.Entries() != 0 || len(a.nodes) != 0 {
		t.Errorf("after everything expired: %d entries, %d nodes", a.Entries(), len(a.nodes))
	}
}

func TestViewFields(t *testing.T) {
	l := DefaultLimits()
	l.MaxNodesListed = 2
	a := mustNew(t, l)
	for i, d := range []outlierreport.Detector{outlierreport.Consecutive5xx, outlierreport.Consecutive5xx, outlierreport.SuccessRate} {
		n := fmt.Sprintf("n%d", i)
		r := report(n, ej("10.0.0.3:9080", d, time.Duration(i)*time.Second, uint32(i+1)))
		if i == 2 {
			r.Total = 300 // a partial report
		}
		if err := a.Put(n, uint64(i+1), r, at(10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Put("other", 9, report("other"), at(10)); err != nil {
		t.Fatal(err)
	}
	// "other" does not hold the service: it is not a client.
	v := a.View(at(10), func(node, service string) bool { return node != "other" })
	want := View{Reporters: 4, Entries: 3, MaxEntries: DefaultMaxEntries, Partial: map[string]uint32{"n2": 300}, Endpoints: []Endpoint{{
		Service: svc, Endpoint: "10.0.0.3:9080", EjectedBy: 3, Clients: 3,
		Detectors: map[string]int{"consecutive5xx": 2, "successRate": 1}, Since: at(8), MaxTimes: 3,
		Nodes: []string{"n0", "n1"}, NodesOmitted: 1,
	}}}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
}

func TestRateBound(t *testing.T) {
	a := mustNew(t, DefaultLimits())
	max := outlierreport.MaxReportsPerWindow
	for i := range max {
		if err := a.Put("n", 1, report("n"), at(float64(i)*0.1)); err != nil {
			t.Fatalf("report %d of %d in one window: %v", i+1, max, err)
		}
	}
	// One past the bound in the same window is refused, and a refused report
	// changes nothing.
	err := a.Put("n", 1, report("n", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 0, 1)), at(9.9))
	if !errors.Is(err, ErrRateLimited) || err.Error() != "node n: outlier report rate exceeded: at most 10 reports per 10s" {
		t.Fatalf("report %d: %v", max+1, err)
	}
	if a.Entries() != 0 {
		t.Fatal("a refused report was kept")
	}
	// Another node has its own window.
	if err := a.Put("m", 2, report("m"), at(9.9)); err != nil {
		t.Fatal(err)
	}
	// The next window starts RateWindow after the first report of this one.
	if err := a.Put("n", 1, report("n"), at(outlierreport.RateWindow.Seconds())); err != nil {
		t.Fatalf("next window: %v", err)
	}
	// A node's rate survives its stream ending (a reconnect does not reset it).
	for range max - 1 {
		if err := a.Put("n", 1, report("n"), at(10.5)); err != nil {
			t.Fatal(err)
		}
	}
	a.Drop("n", 1)
	if err := a.Put("n", 3, report("n"), at(11)); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("after a reconnect within the window: %v", err)
	}
}

func TestEntriesBound(t *testing.T) {
	l := DefaultLimits()
	l.MaxEntries = 3
	a := mustNew(t, l)
	e := func(i int) outlierreport.Entry {
		return ej(fmt.Sprintf("10.0.0.%d:80", i), outlierreport.Consecutive5xx, 0, 1)
	}
	if err := a.Put("a", 1, report("a", e(1), e(2)), at(0)); err != nil {
		t.Fatal(err)
	}
	// At the bound: 3 entries.
	if err := a.Put("b", 2, report("b", e(3)), at(0)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	// One past: refused with the numbers, nothing changes.
	err := a.Put("c", 3, report("c", e(4)), at(0))
	if !errors.Is(err, ErrFull) || err.Error() != "node c: pilot's outlier entries are full: its 1 entries would make 4, at most 3" {
		t.Fatalf("one past the bound: %v", err)
	}
	if a.Entries() != 3 || len(a.View(at(0), holdsAll).Endpoints) != 3 {
		t.Fatalf("after the refusal: %d entries", a.Entries())
	}
	// A node replacing its own report counts only the difference.
	if err := a.Put("a", 1, report("a", e(5), e(6)), at(1)); err != nil {
		t.Fatalf("replacing: %v", err)
	}
	if err := a.Put("a", 1, report("a", e(5), e(6), e(7)), at(2)); !errors.Is(err, ErrFull) {
		t.Fatalf("growing past the bound: %v", err)
	}
	a.Drop("b", 2)
	if err := a.Put("c", 3, report("c", e(4)), at(3)); err != nil || a.Entries() != 3 {
		t.Fatalf("after b left: %v, %d entries", err, a.Entries())
	}
}

// A new stream of the same node does not inherit its old since values.
func TestNewStreamRestartsSince(t *testing.T) {
	a := mustNew(t, DefaultLimits())
	if err := a.Put("a", 1, report("a", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 0, 1)), at(0)); err != nil {
		t.Fatal(err)
	}
	if err := a.Put("a", 2, report("a", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 0, 1)), at(5)); err != nil {
		t.Fatal(err)
	}
	if v := a.View(at(5), holdsAll); !v.Endpoints[0].Since.Equal(at(5)) {
		t.Errorf("since %v, want %v", v.Endpoints[0].Since, at(5))
	}
	// The old stream's end no longer drops the new stream's report.
	a.Drop("a", 1)
	if a.Entries() != 1 {
		t.Error("the old stream dropped the new one's report")
	}
	// A re-ejection (times grew) starts a new since.
	if err := a.Put("a", 2, report("a", ej("10.0.0.3:9080", outlierreport.Consecutive5xx, 0, 2)), at(8)); err != nil {
		t.Fatal(err)
	}
	if v := a.View(at(8), holdsAll); !v.Endpoints[0].Since.Equal(at(8)) {
		t.Errorf("after re-ejection: since %v, want %v", v.Endpoints[0].Since, at(8))
	}
}

func TestLimitsCheck(t *testing.T) {
	if _, err := New(Limits{}); err == nil {
		t.Fatal("zero limits accepted")
	} else if want := "outlier reports: TTL must be > 0, got 0s"; !strings.Contains(err.Error(), want) {
		t.Errorf("%v lacks %q", err, want)
	}
}
