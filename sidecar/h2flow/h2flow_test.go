package h2flow

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestInflow walks one window through takes and adds, line by line.
func TestInflow(t *testing.T) {
	var f Inflow
	f.Init(10000)
	for i, step := range []struct {
		take      uint32 // taken first (0: none)
		takeOK    bool
		add       int // then owed back
		send      int32
		avail     int32
		wantOwing int32
	}{
		{take: 3000, takeOK: true, add: 3000, send: 0, avail: 7000, wantOwing: 3000},         // under Refresh and under what is left: held
		{take: 2000, takeOK: true, add: 2000, send: 5000, avail: 10000, wantOwing: 0},        // Refresh reached: all owed goes back
		{take: 10000, takeOK: true, add: 0, send: 0, avail: 0, wantOwing: 0},                 // the whole window, read nothing yet
		{take: 1, takeOK: false, add: 0, send: 0, avail: 0, wantOwing: 0},                    // one past it: refused, nothing taken
		{take: 0, takeOK: true, add: 100, send: 100, avail: 100, wantOwing: 0},               // owed at least what is left (0): sent at once
		{take: 100, takeOK: true, add: Refresh - 1, send: Refresh - 1, avail: Refresh - 1, wantOwing: 0}, // at what is left
	} {
		if step.take > 0 {
			if ok := f.Take(step.take); ok != step.takeOK {
				t.Fatalf("step %d: Take(%d) = %v, want %v", i, step.take, ok, step.takeOK)
			}
		}
		send := int32(0)
		if step.add > 0 {
			send = f.Add(step.add)
		}
		if send != step.send || f.Avail != step.avail || f.unsent != step.wantOwing {
			t.Fatalf("step %d: sent %d avail %d owing %d, want %d %d %d", i, send, f.Avail, f.unsent, step.send, step.avail, step.wantOwing)
		}
	}
}
