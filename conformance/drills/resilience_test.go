package drills

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/testkit"
)

// Resilience drills (issue #8): the shared harness. A drill runs a real bin/pilot
// and bin/sidecar, upstream applications on loopback addresses of their own that
// a test switches between healthy, failing, slow and closed, and a load generator
// that records every request, so each drill asserts on what the client and the
// upstreams saw, not only on the sidecar's own counters.

// Upstream behaviours a drill switches between.
const (
	upOK   int32 = iota // 200, the upstream's name as the body
	up503               // 503 at once
	upSlow              // holds the request until released (upstream.release) or cancelled
)

// upstreamPort is every drill upstream's port (each has its own loopback IP, so
// a Service's targetPort is the same for all of them).
const upstreamPort = 8080

// IDHeader carries the load generator's request number; the sidecar forwards it on
// every attempt, so an upstream that sees a number again is seeing a retry.
const idHeader = "x-drill-id"

// upstreamHeader names the upstream that answered (the fallback's answer included).
const upstreamHeader = "x-drill-upstream"

// tracker is what the upstreams of one Service count together: which request
// numbers they have seen (a number seen again, at any of them, is a retry), and
// how many requests and retries they held at once.
type tracker struct {
	mu       sync.Mutex
	seen     map[string]bool
	retries  int // arrivals whose number was seen before
	active   int // requests being handled
	activeRt int // retries being handled
	maxAct   int // most requests handled at once
	maxRt    int // most retries handled at once
}

// trackerStats is a copy of a tracker's counts.
type trackerStats struct{ retries, active, maxActive, maxRetries int }

func (k *tracker) stats() trackerStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return trackerStats{retries: k.retries, active: k.active, maxActive: k.maxAct, maxRetries: k.maxRt}
}

// arrive counts a request with number id in; the returned func counts it out.
func (k *tracker) arrive(id string) (done func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	retry := id != "" && k.seen[id]
	if id != "" {
		k.seen[id] = true
	}
	k.active++
	k.maxAct = max(k.maxAct, k.active)
	if retry {
		k.retries++
		k.activeRt++
		k.maxRt = max(k.maxRt, k.activeRt)
	}
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.active--
		if retry {
			k.activeRt--
		}
	}
}

// upstream is an HTTP application on its own loopback address, switched between
// healthy, failing and slow. It records the time (and mode) of every request.
type upstream struct {
	name string
	ip   string
	k    *tracker
	mode atomic.Int32
	// delay is added before every answer (the upstream's service time).
	delay atomic.Int64

	mu       sync.Mutex
	arrivals []time.Time   // every request's arrival
	modes    []int32       // the mode each was answered in
	release  chan struct{} // closed to let held (upSlow) requests go
	held     int           // upSlow requests being held
	srv      *http.Server
	done     chan struct{}
}

// startUpstreams starts one upstream per name, on base.11, base.12, ..., sharing
// one tracker (the upstreams of one Service).
func startUpstreams(t *testing.T, base string, names ...string) []*upstream {
	t.Helper()
	k := &tracker{seen: map[string]bool{}}
	var ups []*upstream
	for i, name := range names {
		u := &upstream{name: name, ip: fmt.Sprintf("%s.%d", base, 11+i), k: k, release: make(chan struct{})}
		ln, err := net.Listen("tcp", u.addr())
		if err != nil {
			t.Fatal(err)
		}
		u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 5 * time.Second}
		u.done = make(chan struct{})
		go func() { defer close(u.done); _ = u.srv.Serve(ln) }()
		t.Cleanup(func() {
			u.unblock()
			u.srv.Close()
			<-u.done
		})
		ups = append(ups, u)
	}
	return ups
}

func (u *upstream) addr() string { return fmt.Sprintf("%s:%d", u.ip, upstreamPort) }

func (u *upstream) set(mode int32) { u.mode.Store(mode) }

// unblock lets every held (upSlow) request go, now and later.
func (u *upstream) unblock() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

// holding is how many upSlow requests the upstream holds now.
func (u *upstream) holding() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.held
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	mode := u.mode.Load()
	defer u.k.arrive(r.Header.Get(idHeader))()
	u.mu.Lock()
	u.arrivals = append(u.arrivals, time.Now())
	u.modes = append(u.modes, mode)
	release := u.release
	u.mu.Unlock()
	if d := time.Duration(u.delay.Load()); d > 0 {
		select {
		case <-time.After(d): // the upstream's own service time
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set(upstreamHeader, u.name)
	switch mode {
	case up503:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s failing", u.name)
	case upSlow:
		u.mu.Lock()
		u.held++
		u.mu.Unlock()
		defer func() { u.mu.Lock(); u.held--; u.mu.Unlock() }()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, u.name)
	default:
		fmt.Fprint(w, u.name)
	}
}

// upstreamStats is a copy of the upstream's arrivals.
type upstreamStats struct {
	arrivals []time.Time
	modes    []int32
}

func (u *upstream) stats() upstreamStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return upstreamStats{arrivals: slices.Clone(u.arrivals), modes: slices.Clone(u.modes)}
}

// hits counts the requests that arrived in [from, to) (a zero to: until now).
func (s upstreamStats) hits(from, to time.Time) int {
	n := 0
	for _, a := range s.arrivals {
		if !a.Before(from) && (to.IsZero() || a.Before(to)) {
			n++
		}
	}
	return n
}

// last is the last arrival, zero if none.
func (s upstreamStats) last() time.Time {
	if len(s.arrivals) == 0 {
		return time.Time{}
	}
	return s.arrivals[len(s.arrivals)-1]
}

// lastIn is the last arrival answered in mode, zero if none.
func (s upstreamStats) lastIn(mode int32) time.Time {
	var last time.Time
	for i, a := range s.arrivals {
		if s.modes[i] == mode && a.After(last) {
			last = a
		}
	}
	return last
}

// firstAfter is the first arrival after t, zero if none.
func (s upstreamStats) firstAfter(t time.Time) time.Time {
	for _, a := range s.arrivals {
		if a.After(t) {
			return a
		}
	}
	return time.Time{}
}

// result is one request the load generator sent.
type result struct {
	start    time.Time
	took     time.Duration
	code     int    // 0: transport error
	body     string // the answer's first bodyPrefix bytes
	upstream string // upstreamHeader of the answer
	priority string // x-weft-priority
	overflow string // x-weft-overflow
	err      error
}

func (r result) ok() bool { return r.err == nil && r.code == http.StatusOK }

// loadgen sends GETs for one host through a sidecar's outbound listener and
// records every request: either at a fixed rate (open loop: request i is due at
// start + i/rate, so a loaded machine that falls behind catches up instead of
// sending less) or from a fixed number of workers (closed loop).
type loadgen struct {
	w      ws
	host   string
	client *http.Client
	seq    atomic.Int64
	stopc  chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	results []result
}

// bodyPrefix is how much of each answer's body the load generator keeps.
const bodyPrefix = 256

// loadClientTimeout bounds one request of the load generator (generous: a drill
// asserts on codes and latencies it measures, not on this).
const loadClientTimeout = 20 * time.Second

func newLoadgen(t *testing.T, w ws, host string) *loadgen {
	lg := &loadgen{w: w, host: host, stopc: make(chan struct{}),
		client: &http.Client{Timeout: loadClientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	t.Cleanup(lg.stop)
	return lg
}

// startRate starts an open-loop load of rate requests per second.
func startRate(t *testing.T, w ws, host string, rate int) *loadgen {
	lg := newLoadgen(t, w, host)
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

// startPaced starts n workers that share a rate of requests per second: each
// takes the next request's due time (start + i/rate) and sends it then, or at
// once if late. Closed-loop bounded (at most n in flight), so a slow client (the
// race detector) sends less instead of piling connections up in the sidecar.
func startPaced(t *testing.T, w ws, host string, n, rate int) *loadgen {
	lg := newLoadgen(t, w, host)
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

func (lg *loadgen) do() result {
	id := lg.seq.Add(1)
	r := result{start: time.Now()}
	req, err := http.NewRequest(http.MethodGet, "http://"+lg.w.outbound()+"/drill", nil)
	if err != nil {
		panic(err) // a constant URL always parses
	}
	req.Host = lg.host
	req.Header.Set(idHeader, strconv.FormatInt(id, 10))
	resp, err := lg.client.Do(req)
	if err == nil {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(resp.Body, bodyPrefix)); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		r.body = string(b)
		r.code = resp.StatusCode
		r.upstream = resp.Header.Get(upstreamHeader)
		r.priority = resp.Header.Get("x-weft-priority")
		r.overflow = resp.Header.Get("x-weft-overflow")
	}
	r.took, r.err = time.Since(r.start), err
	lg.mu.Lock()
	lg.results = append(lg.results, r)
	lg.mu.Unlock()
	return r
}

// stopped reports whether stop was called.
func (lg *loadgen) stopped() bool {
	select {
	case <-lg.stopc:
		return true
	default:
		return false
	}
}

// stop ends the load and waits for every request it sent.
func (lg *loadgen) stop() {
	select {
	case <-lg.stopc:
	default:
		close(lg.stopc)
	}
	lg.wg.Wait()
	lg.client.CloseIdleConnections()
}

// since returns the results of requests started at or after t.
func (lg *loadgen) since(t time.Time) []result {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var out []result
	for _, r := range lg.results {
		if !r.start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// summary is what a set of results adds up to.
type summary struct {
	n, ok      int
	byUpstream map[string]int // successful answers per upstream
	codes      map[int]int
	firstErr   string
}

func summarize(rs []result) summary {
	s := summary{n: len(rs), byUpstream: map[string]int{}, codes: map[int]int{}}
	for _, r := range rs {
		s.codes[r.code]++
		if r.ok() {
			s.ok++
			s.byUpstream[r.upstream]++
		} else if s.firstErr == "" {
			s.firstErr = fmt.Sprintf("%d %v (upstream %q, overflow %q)", r.code, r.err, r.upstream, r.overflow)
		}
	}
	return s
}

func (s summary) rate() float64 {
	if s.n == 0 {
		return 0
	}
	return float64(s.ok) / float64(s.n)
}

func (s summary) String() string {
	return fmt.Sprintf("%d requests, %d ok (%.3f%%), per upstream %v, codes %v", s.n, s.ok, 100*s.rate(), s.byUpstream, s.codes)
}

// percentile of the latencies (q in 0..1).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// ---- the Weft YAML of the drills ----

// svcYAML is a Service name (port 9080, HTTP, to every upstream's port) in the
// drills' namespace with one Workload per upstream.
func svcYAML(name string, ups ...*upstream) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: %s, namespace: shop}
spec:
  selector: {app: %s}
  ports: [{name: http, port: 9080, targetPort: %d, protocol: HTTP}]
`, name, name, upstreamPort)
	for _, u := range ups {
		fmt.Fprintf(&b, `---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: %s, namespace: shop, labels: {app: %s}}
spec: {address: %s, serviceAccount: %s}
`, u.name, name, u.ip, name)
	}
	return b.String()
}

// routeYAML is a Route for service name sending everything to it, with rule
// fields (retries, timeout, fallback) added as YAML at the rule's indentation.
func routeYAML(name, rule string) string {
	return fmt.Sprintf(`---
apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: %s, namespace: shop}
spec:
  hosts: [%s]
  http:
  - name: all
    route: [{destination: {service: %s, port: 9080}, weight: 100}]
%s`, name, name, name, indent(rule, "    "))
}

// policyYAML is a DestinationPolicy for service name with spec fields as YAML.
func policyYAML(name, spec string) string {
	return fmt.Sprintf(`---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: %s, namespace: shop}
spec:
  service: %s
%s`, name, name, indent(spec, "  "))
}

func indent(s, by string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" {
			b.WriteString(by + l)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ---- a real pilot, a real sidecar ----

// meshUp starts a real pilot on ip base.1, applies yaml and starts a sidecar
// (the drills' client workload, shop/productpage) on the same IP, ready with
// pilot's revision of yaml active. The upstreams use base.11 and up.
func meshUp(t *testing.T, base, yaml string, extra ...string) (*pilotProc, *sidecar) {
	t.Helper()
	ip := base + ".1"
	p := startPilot(t, ip)
	rev := p.applyRev(yaml)
	w := ws{ip: ip, nodeID: "productpage-a", stateDir: filepath.Join(t.TempDir(), "state"), keyFile: p.KeyFile()}
	sc := startSidecar(t, w, p.addr(), extra...)
	sc.waitReady(30 * time.Second)
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("revision %d active on the sidecar", rev), func() bool {
		return sc.configDump().Revision >= rev
	})
	return p, sc
}

// outliers is the sidecar's admin /outliers as raw JSON.
func (s *sidecar) outliers() (string, error) {
	resp, err := hc.Get("http://" + s.w.admin() + "/outliers")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/outliers: %s: %s", resp.Status, b)
	}
	return string(b), nil
}

// ejected reports whether the sidecar's /outliers lists addr as ejected now.
func (s *sidecar) ejected(addr string) (bool, string, error) {
	body, err := s.outliers()
	if err != nil {
		return false, "", err
	}
	var doc any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return false, body, fmt.Errorf("/outliers is not JSON: %w", err)
	}
	return strings.Contains(body, `"`+addr+`"`), body, nil
}

// metricsPage returns the sidecar's /metrics.
func (s *sidecar) metricsPage() string {
	s.t.Helper()
	resp, err := hc.Get("http://" + s.w.admin() + "/metrics")
	if err != nil {
		s.t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("metrics: %v", err)
	}
	return string(b)
}

// metricLines are the /metrics samples whose line starts with prefix.
func (s *sidecar) metricLines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(s.metricsPage(), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
