package httpproxy

import (
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// The grpc-status → HTTP mapping outlier detection sees (Envoy's grpcToHttpStatus).
func TestGRPCOutcome(t *testing.T) {
	want := map[string]outlier.Outcome{
		"0": 200, "1": 499, "2": 500, "3": 400, "4": 504, "5": 404, "6": 409, "7": 403, "8": 429,
		"9": 400, "10": 409, "11": 400, "12": 501, "13": 500, "14": 503, "15": 500, "16": 401, "17": 500,
	}
	for s, o := range want {
		if got, ok := grpcOutcome(s); !ok || got != o {
			t.Errorf("grpc-status %s: %v %v, want %v", s, got, ok, o)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1e3"} {
		if _, ok := grpcOutcome(bad); ok {
			t.Errorf("grpc-status %q accepted", bad)
		}
	}
}

func testCluster(t *testing.T, maxRetries uint32) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Spec{Name: "c", ConnectTimeout: time.Second,
		Limits:    circuitbreak.Limits{MaxConnections: 10, MaxPendingRequests: 10, MaxRequests: 10, MaxRetries: maxRetries},
		Endpoints: []*cluster.Endpoint{cluster.NewEndpoint(netip.MustParseAddrPort("10.0.0.1:80"), 1, true)}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// decide, line by line: what follows each failure, with and without retries
// left, a fallback, a token, and time before the route deadline.
func TestDecide(t *testing.T) {
	p := &Proxy{cfg: Config{Rand: func() uint64 { return uint64(10 * time.Millisecond) }}}
	retry := &dataplane.Retry{On: dataplane.Retry5xx | dataplane.RetryUnavailable, NumRetries: 2, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond}
	r := &dataplane.Route{Retry: retry}
	noPolicy := &dataplane.Route{}
	far, past := time.Now().Add(time.Hour), time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name     string
		route    *dataplane.Route
		attempt  int
		fallback bool
		tokens   uint32
		cause    retryCause
		status   int
		deadline time.Time
		want     step
	}{
		{"200 ends", r, 0, true, 3, causeStatus, 200, far, stepNone},
		{"503 retried", r, 0, false, 3, causeStatus, 503, far, stepRetry},
		{"503 retried without a deadline", r, 0, false, 3, causeStatus, 503, time.Time{}, stepRetry},
		{"503, retries used, fallback", r, 2, true, 3, causeStatus, 503, far, stepFallback},
		{"503, retries used, no fallback", r, 2, false, 3, causeStatus, 503, far, stepNone},
		{"503, no token, fallback", r, 0, true, 0, causeStatus, 503, far, stepFallback},
		{"503, back-off past the deadline, no fallback", r, 0, false, 3, causeStatus, 503, time.Now().Add(5 * time.Millisecond), stepNone},
		{"503, deadline passed, fallback refused", r, 0, true, 3, causeStatus, 503, past, stepNone},
		{"409 not retried, no fallback on it", r, 0, true, 3, causeStatus, 409, far, stepNone},
		{"500 without a policy: no fallback", noPolicy, 0, true, 3, causeStatus, 500, far, stepNone},
		{"502 without a policy falls back", noPolicy, 0, true, 3, causeStatus, 502, far, stepFallback},
		{"reset retried under 5xx", r, 0, true, 3, causeReset, 0, far, stepRetry},
		{"connect failure retried under 5xx", r, 0, true, 3, causeConnect, 0, far, stepRetry},
		{"timeout retried under 5xx", r, 0, true, 3, causeTimeout, 0, far, stepRetry},
		{"overflow falls back, never retried", r, 0, true, 3, causeLocal, 0, far, stepFallback},
		{"refused stream retried under 5xx", r, 0, false, 3, causeRefused, 0, far, stepRetry},
		{"refused stream not retried under reset", &dataplane.Route{Retry: &dataplane.Retry{On: dataplane.RetryReset, NumRetries: 2, BackoffBase: 1, BackoffMax: 1}}, 0, false, 3, causeRefused, 0, far, stepNone},
		{"overflow without fallback ends", r, 0, false, 3, causeLocal, 0, far, stepNone},
		{"grpc unavailable retried", r, 0, false, 3, causeGRPC, dataplane.GRPCUnavailable, far, stepRetry},
		{"grpc unavailable without a policy falls back", noPolicy, 0, true, 3, causeGRPC, dataplane.GRPCUnavailable, far, stepFallback},
		{"grpc internal not named", r, 0, true, 3, causeGRPC, dataplane.GRPCInternal, far, stepNone},
	} {
		c := testCluster(t, tc.tokens)
		var tr tries
		n := 0
		if tc.route.Retry != nil {
			n = tc.route.Retry.NumRetries
		}
		tr.reset(n, tc.fallback)
		tr.attempt = tc.attempt
		got := p.decide(&tr, tc.route, c, tc.cause, tc.status, tc.deadline)
		if got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if tr.token != (got == stepRetry) {
			t.Errorf("%s: token held %v with step %v", tc.name, tr.token, got)
		}
		if got == stepRetry && tr.wait != 10*time.Millisecond {
			t.Errorf("%s: wait %v, want the drawn 10ms", tc.name, tr.wait)
		}
		tr.release(c)
		if tc.tokens > 0 && !c.Breaker.Acquire(circuitbreak.Retries) {
			t.Errorf("%s: the token was not given back", tc.name)
		}
	}
}

// The replay buffer keeps a body of exactly its capacity and gives it to every
// attempt from the start; one byte more and it is not replayable, counted once.
func TestReplayBufBound(t *testing.T) {
	for _, tc := range []struct {
		size       int
		replayable bool
	}{{1024, true}, {1025, false}} {
		p := &Proxy{}
		p.bodies.New = func() any { b := make([]byte, 0, 1024); return &b }
		body := strings.Repeat("y", tc.size)
		rb := p.newReplay(strings.NewReader(body), true)
		first := rb.reader()
		if b, err := io.ReadAll(first); err != nil || string(b) != body {
			t.Fatalf("size %d: first attempt read %d bytes, %v", tc.size, len(b), err)
		}
		first.Close()
		if got := rb.replayable(); got != tc.replayable {
			t.Fatalf("size %d: replayable %v, want %v", tc.size, got, tc.replayable)
		}
		if n := p.retries.BodyNotBuffered[NotBufferedTooLarge].Load(); (n == 1) == tc.replayable {
			t.Errorf("size %d: counted %d too large", tc.size, n)
		}
		second := rb.reader()
		b, err := io.ReadAll(second)
		if tc.replayable && (err != nil || string(b) != body) {
			t.Errorf("size %d: replay read %d bytes, %v", tc.size, len(b), err)
		}
		if !tc.replayable && err == nil {
			t.Errorf("size %d: replay of a body not kept succeeded", tc.size)
		}
		rb.done()
		if _, err := rb.reader().Read(make([]byte, 1)); err != errReplayDetached {
			t.Errorf("size %d: read after done: %v", tc.size, err)
		}
	}
}

// An abandoned attempt's reader still blocked on the client does not lose what
// it reads: the next attempt gets every byte, in order, and done never waits.
func TestReplayBufAbandonedReader(t *testing.T) {
	p := &Proxy{}
	p.bodies.New = func() any { b := make([]byte, 0, 1024); return &b }
	pr, pw := io.Pipe()
	rb := p.newReplay(pr, true)
	old := rb.reader()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the old attempt's transport, blocked in a read of the client's body
		defer wg.Done()
		buf := make([]byte, 8)
		for {
			if _, err := old.Read(buf); err != nil {
				return
			}
		}
	}()
	if _, err := pw.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	old.Close()
	next := rb.reader()
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(next); got <- string(b) }()
	if _, err := pw.Write([]byte("def")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if s := <-got; s != "abcdef" {
		t.Errorf("next attempt read %q, want abcdef", s)
	}
	wg.Wait()
	rb.done()
}
