package httpproxy

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// TestIdleDeadlineSlack: the idle deadline set is kept while it fires within
// [timeout, timeout+slack] of the new answer, at the bound, and moved one past it
// (either way): the timeout never fires early nor later than timeout+slack.
func TestIdleDeadlineSlack(t *testing.T) {
	const timeout = 800 * time.Millisecond
	const slack = timeout / IdleTimeoutSlackDivisor
	c, peer := net.Pipe()
	defer c.Close()
	defer peer.Close()
	t0 := time.Now()
	var rd readDeadline
	rd.idle(c, t0, timeout)
	if want := t0.Add(timeout + slack); !rd.at.Equal(want) {
		t.Fatalf("first idle deadline %v, want now+timeout+slack %v", rd.at, want)
	}
	set := rd.at
	for _, tc := range []struct {
		name string
		now  time.Time
		kept bool
	}{
		{"same instant", t0, true},
		{"slack later: at the bound", t0.Add(slack), true},
		{"one past the bound", t0.Add(slack + 1), false},
		{"before the set (clock stepped back)", t0.Add(-1), false},
	} {
		rd := readDeadline{at: set, known: true}
		rd.idle(c, tc.now, timeout)
		if kept := rd.at.Equal(set); kept != tc.kept {
			t.Errorf("%s: kept %v, want %v", tc.name, kept, tc.kept)
		}
		if fire := rd.at.Sub(tc.now); fire < timeout || fire > timeout+slack {
			t.Errorf("%s: fires %s after the answer, want within [%s, %s]", tc.name, fire, timeout, timeout+slack)
		}
	}
	// Unknown (the sniff's deadline) or none: always set.
	for _, rd := range []readDeadline{{}, {known: true}} {
		rd.idle(c, t0, timeout)
		if !rd.at.Equal(set) {
			t.Errorf("from %+v: deadline %v, want %v", rd, rd.at, set)
		}
	}
}

// TestClearDeadline: clearing is skipped only when no deadline is known to be set.
func TestClearDeadline(t *testing.T) {
	c, peer := net.Pipe()
	defer c.Close()
	defer peer.Close()
	for _, rd := range []readDeadline{{}, {known: true}, {at: time.Now(), known: true}} {
		rd.clear(c)
		if !rd.known || !rd.at.IsZero() {
			t.Errorf("after clear: %+v, want known and zero", rd)
		}
	}
}

// TestHeadBuffered: only a whole head starting with its request line counts, so a
// head that must still be read gets the header deadline.
func TestHeadBuffered(t *testing.T) {
	for in, want := range map[string]bool{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n":         true,
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HT": true, // pipelined: the first is whole
		"GET / HTTP/1.1\r\nHost: a\r\n":             false,
		"GET / HTTP/1.1\n\n":                        false, // bare LF: not recognized, read under the header deadline
		"\r\n\r\nGET / HTTP/1.1\r\n":                false, // empty lines before the start line
		"G":                                         false,
	} {
		br := bufio.NewReaderSize(strings.NewReader(in), 64)
		if _, err := br.Peek(1); err != nil {
			t.Fatal(err)
		}
		if got := headBuffered(br); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}
