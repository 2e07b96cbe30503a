package outlier

import (
	"fmt"
	"testing"
)

// TestRecorderBounds: the ring keeps the newest `recent`, the log queue drops past
// `unlogged` and says how many; sizes are checked at the bound and one past.
func TestRecorderBounds(t *testing.T) {
	if _, err := NewRecorder(MaxRecorded+1, 0); err == nil {
		t.Fatal("recent over the bound accepted")
	}
	if _, err := NewRecorder(0, MaxRecorded+1); err == nil {
		t.Fatal("unlogged over the bound accepted")
	}
	if _, err := NewRecorder(MaxRecorded, MaxRecorded); err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		r.Record(Event{Host: fmt.Sprint(i)})
	}
	select {
	case <-r.Wake():
	default:
		t.Fatal("no wake-up")
	}
	var hosts []string
	for _, e := range r.Recent() {
		hosts = append(hosts, e.Host)
	}
	if fmt.Sprint(hosts) != "[3 4 5]" {
		t.Fatalf("recent %v", hosts)
	}
	evs, dropped := r.Take(nil)
	if len(evs) != 4 || dropped != 2 || evs[0].Host != "0" {
		t.Fatalf("take %d dropped %d", len(evs), dropped)
	}
	if evs, dropped := r.Take(nil); len(evs) != 0 || dropped != 0 {
		t.Fatalf("second take %d %d", len(evs), dropped)
	}
	if n := testing.AllocsPerRun(100, func() { r.Record(Event{Host: "x"}); r.Take(evs[:0]) }); n != 0 {
		t.Fatalf("Record allocates %v", n)
	}
}
