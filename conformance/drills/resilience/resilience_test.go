package resilience

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/conformance/internal/drillkit"
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
	defer u.k.arrive(r.Header.Get(drillkit.IDHeader))()
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
	w.Header().Set(drillkit.UpstreamHeader, u.name)
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

// summary is what a set of results adds up to.
type summary struct {
	n, ok      int
	byUpstream map[string]int // successful answers per upstream
	codes      map[int]int
	firstErr   string
}

func summarize(rs []drillkit.Result) summary {
	s := summary{n: len(rs), byUpstream: map[string]int{}, codes: map[int]int{}}
	for _, r := range rs {
		s.codes[r.Code]++
		if r.OK() {
			s.ok++
			s.byUpstream[r.Upstream]++
		} else if s.firstErr == "" {
			s.firstErr = fmt.Sprintf("%d %v (upstream %q, overflow %q)", r.Code, r.Err, r.Upstream, r.Overflow)
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
func meshUp(t *testing.T, base, yaml string, extra ...string) (*drillkit.PilotProc, *drillkit.Sidecar) {
	t.Helper()
	ip := base + ".1"
	p := drillkit.StartPilot(t, ip)
	rev := p.ApplyRev(yaml)
	w := drillkit.Workload{IP: ip, NodeID: "productpage-a", StateDir: filepath.Join(t.TempDir(), "state"), KeyFile: p.KeyFile()}
	sc := drillkit.StartSidecar(t, w, p.Addr(), extra...)
	sc.WaitReady(30 * time.Second)
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("revision %d active on the sidecar", rev), func() bool {
		return sc.ConfigDump().Revision >= rev
	})
	return p, sc
}
