package drillkit

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// IDHeader carries the load generator's request number; the sidecar forwards it on
// every attempt, so an upstream that sees a number again is seeing a retry.
const IDHeader = "x-drill-id"

// UpstreamHeader names the upstream that answered (the fallback's answer included).
const UpstreamHeader = "x-drill-upstream"

// Result is one request the load generator sent.
type Result struct {
	Start    time.Time
	Took     time.Duration
	Code     int    // 0: transport error
	Body     string // the answer's first bodyPrefix bytes
	Upstream string // upstreamHeader of the answer
	Priority string // x-weft-priority
	Overflow string // x-weft-overflow
	Err      error
}

func (r Result) OK() bool { return r.Err == nil && r.Code == http.StatusOK }

// Loadgen sends GETs for one host through a sidecar's outbound listener and
// records every request: either at a fixed rate (open loop: request i is due at
// start + i/rate, so a loaded machine that falls behind catches up instead of
// sending less) or from a fixed number of workers (closed loop).
type Loadgen struct {
	w      Workload
	host   string
	client *http.Client
	seq    atomic.Int64
	stopc  chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	results []Result
}

// BodyPrefix is how much of each answer's body the load generator keeps.
const BodyPrefix = 256

// LoadClientTimeout bounds one request of the load generator (generous: a drill
// asserts on codes and latencies it measures, not on this).
const LoadClientTimeout = 20 * time.Second

func NewLoadgen(t testing.TB, w Workload, host string) *Loadgen {
	lg := &Loadgen{w: w, host: host, stopc: make(chan struct{}),
		client: &http.Client{Timeout: LoadClientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	t.Cleanup(lg.Stop)
	return lg
}

// StartRate starts an open-loop load of rate requests per second.
func StartRate(t testing.TB, w Workload, host string, rate int) *Loadgen {
	lg := NewLoadgen(t, w, host)
	lg.wg.Add(1)
	go func() {
		defer lg.wg.Done()
		interval := time.Second / time.Duration(rate)
		start := time.Now()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for i := 0; ; i++ {
			wait := time.NewTimer(time.Until(start.Add(time.Duration(i) * interval)))
			select {
			case <-lg.stopc:
				wait.Stop()
				return
			case <-wait.C:
			}
			if lg.stopped() {
				return
			}
			inflight.Add(1)
			go func() { defer inflight.Done(); lg.do() }()
		}
	}()
	return lg
}

// StartPaced starts n workers that share a rate of requests per second: each
// takes the next request's due time (start + i/rate) and sends it then, or at
// once if late. Closed-loop bounded (at most n in flight), so a slow client (the
// race detector) sends less instead of piling connections up in the sidecar.
func StartPaced(t testing.TB, w Workload, host string, n, rate int) *Loadgen {
	lg := NewLoadgen(t, w, host)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var next atomic.Int64
	for range n {
		lg.wg.Add(1)
		go func() {
			defer lg.wg.Done()
			for {
				due := time.NewTimer(time.Until(start.Add(time.Duration(next.Add(1)-1) * interval)))
				select {
				case <-lg.stopc:
					due.Stop()
					return
				case <-due.C:
				}
				if lg.stopped() { // a late worker's timer is ready at once: stop wins
					return
				}
				lg.do()
			}
		}()
	}
	return lg
}

func (lg *Loadgen) do() Result {
	id := lg.seq.Add(1)
	r := Result{Start: time.Now()}
	req, err := http.NewRequest(http.MethodGet, "http://"+lg.w.Outbound()+"/drill", nil)
	if err != nil {
		panic(err) // a constant URL always parses
	}
	req.Host = lg.host
	req.Header.Set(IDHeader, strconv.FormatInt(id, 10))
	resp, err := lg.client.Do(req)
	if err == nil {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(resp.Body, BodyPrefix)); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		r.Body = string(b)
		r.Code = resp.StatusCode
		r.Upstream = resp.Header.Get(UpstreamHeader)
		r.Priority = resp.Header.Get("x-weft-priority")
		r.Overflow = resp.Header.Get("x-weft-overflow")
	}
	r.Took, r.Err = time.Since(r.Start), err
	lg.mu.Lock()
	lg.results = append(lg.results, r)
	lg.mu.Unlock()
	return r
}

// stopped reports whether stop was called.
func (lg *Loadgen) stopped() bool {
	select {
	case <-lg.stopc:
		return true
	default:
		return false
	}
}

// stop ends the load and waits for every request it sent.
func (lg *Loadgen) Stop() {
	select {
	case <-lg.stopc:
	default:
		close(lg.stopc)
	}
	lg.wg.Wait()
	lg.client.CloseIdleConnections()
}

// Since returns the results of requests started at or after t.
func (lg *Loadgen) Since(t time.Time) []Result {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var out []Result
	for _, r := range lg.results {
		if !r.Start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}
