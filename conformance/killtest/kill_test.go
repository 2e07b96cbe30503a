// Package killtest proves the store's crash atomicity end to end: a real pilot
// process is SIGKILLed at random moments during a bulk apply, restarted, and the
// store must hold either the whole old set or the whole new set, never a mix.
package killtest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup)) }

var (
	iterations = flag.Int("killtest.iterations", 50, "kill -9 iterations")
	objects    = flag.Int("killtest.objects", 200, "objects per bulk apply")
	seed       = flag.Uint64("killtest.seed", 0, "random seed (0 = from the clock)")
)

const (
	ns        = "killtest"
	iterLabel = "weft.dev/iteration"
	// Bounds on waiting for a process; generous for a loaded 2-core machine.
	startTimeout = 20 * time.Second
	reqTimeout   = 30 * time.Second
)

// state is what the store must hold after a restart: every object at iteration
// iter, generation gen, store revision rev.
type state struct {
	iter int
	gen  int64
	rev  int64
}

func TestKillDuringApply(t *testing.T) {
	bin := proc.Build(t, proc.Pilot)
	dataDir := filepath.Join(t.TempDir(), "data")
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -killtest.seed=%d)", s, s)
	rng := rand.New(rand.NewPCG(s, s>>1|1))
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: reqTimeout}

	// Iteration 0 completes: it creates the objects and measures how long a bulk
	// apply takes, which bounds the random kill delay.
	p := startPilot(t, bin, dataDir, 0)
	start := time.Now()
	rev, err := bulkApply(hc, p.url, 0, *objects)
	applyDur := time.Since(start)
	if err != nil {
		t.Fatalf("first apply: %v", err)
	}
	want := state{iter: 0, gen: 1, rev: rev}
	p.verify(t, hc, want, *objects)
	p.kill(t)
	t.Logf("bulk apply of %d objects took %v", *objects, applyDur)

	// Each iteration restarts pilot, checks the previous kill left the whole old
	// or the whole new set, then fires the next apply and kills pilot during it.
	var sawOld, sawNew int
	var prev killed // the apply the last kill interrupted (none before iteration 1)
	for i := 1; i <= *iterations+1; i++ {
		p := startPilot(t, bin, dataDir, i)
		if prev.iter > 0 {
			got := p.read(t, hc, *objects)
			old, next := want, state{iter: prev.iter, gen: want.gen + 1, rev: want.rev + 1}
			switch got {
			case old:
				sawOld++
				if prev.applyErr == nil {
					t.Fatalf("iteration %d: apply succeeded but the store is still at the old state %+v", prev.iter, old)
				}
			case next:
				sawNew++
				want = next
			default:
				t.Fatalf("iteration %d (kill after %v): store is %+v, want all old %+v or all new %+v\nlog:\n%s",
					prev.iter, prev.delay, got, old, next, p.log())
			}
		}
		p.verify(t, hc, want, *objects)
		if i > *iterations {
			// The last start ends with SIGTERM: the graceful path must exit 0.
			p.stop(t)
			break
		}

		// Kill somewhere in [0, 1.2*applyDur]: mostly mid-apply, sometimes just after.
		prev = killed{iter: i, delay: time.Duration(rng.Int64N(int64(applyDur)*6/5 + 1))}
		done := make(chan error, 1)
		go func() {
			_, err := bulkApply(hc, p.url, i, *objects)
			done <- err
		}()
		time.Sleep(prev.delay) // the random kill moment is the point of the test
		p.kill(t)
		prev.applyErr = <-done
	}
	t.Logf("%d iterations: %d ended at the old revision, %d at the new one", *iterations, sawOld, sawNew)
}

// killed records an apply that was interrupted by SIGKILL.
type killed struct {
	iter     int
	delay    time.Duration
	applyErr error
}

type pilotProc struct {
	*proc.Proc
	url string
}

// freePort picks a port on a loopback address no other test uses, so the freed
// port cannot turn into another connection's ephemeral port before pilot binds it.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.77.100.2:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func startPilot(t *testing.T, bin, dataDir string, iter int) *pilotProc {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for attempt := 0; ; attempt++ {
		addr := freePort(t)
		p := &pilotProc{url: "http://" + addr, Proc: proc.Start(t, fmt.Sprintf("pilot %d (attempt %d)", iter, attempt), bin,
			"--data-dir", dataDir, "--admin-addr", addr, "--xds-addr", "127.0.0.1:0", "--xds-tls-addr", "127.0.0.1:0", "--webhook-addr", "127.0.0.1:0", "--log-level", "warn")}
		err := p.waitHealthy(time.Until(deadline))
		if err == nil {
			return p
		}
		p.kill(t)
		if time.Now().After(deadline) || attempt >= 3 {
			t.Fatalf("pilot did not become healthy: %v\nlog:\n%s", err, p.log())
		}
		// The free port may have been taken between Close and pilot's Listen: retry.
	}
}

func (p *pilotProc) log() string { return p.Logs.String() }

// waitHealthy polls /healthz for up to d; it gives up at once if pilot exits.
func (p *pilotProc) waitHealthy(d time.Duration) error {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	var exited error // set when pilot is gone: the poll ends, there is nothing to wait for
	err := testkit.Poll(d, func() error {
		select {
		case <-p.Exited():
			exited = fmt.Errorf("pilot exited: %v", p.Err())
			return nil
		default:
		}
		resp, err := hc.Get(p.url + "/healthz")
		if err != nil {
			return fmt.Errorf("no healthy /healthz: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("no healthy /healthz: %s", resp.Status)
		}
		return nil
	})
	if exited != nil {
		return exited
	}
	return err
}

// kill SIGKILLs pilot and waits for it to be gone.
func (p *pilotProc) kill(t *testing.T) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// stop SIGTERMs pilot and expects a clean exit.
func (p *pilotProc) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(startTimeout); err != nil {
		t.Errorf("pilot after SIGTERM: %v\nlog:\n%s", err, p.log())
	}
}

func manifest(iter, n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata:
  name: svc-%d
  namespace: %s
  annotations: {%s: "%d"}
spec:
  ports: [{name: http, port: %d}]
`, i, ns, iterLabel, iter, 10000+iter)
	}
	return b.Bytes()
}

func bulkApply(hc *http.Client, url string, iter, n int) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+api.Prefix+"/apply", bytes.NewReader(manifest(iter, n)))
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("apply answered %d: %s", resp.StatusCode, body)
	}
	var ar api.ApplyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return 0, err
	}
	return ar.Revision, nil
}

func getJSON(t *testing.T, hc *http.Client, url string, v any) http.Header {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.Header
}

// read returns the store's state, or a state with iter -1 when the objects do
// not all agree (which verify and the caller report as a failure).
func (p *pilotProc) read(t *testing.T, hc *http.Client, n int) state {
	t.Helper()
	var lr api.ListResponse
	hdr := getJSON(t, hc, p.url+api.Prefix+"/namespaces/"+ns+"/services", &lr)
	if h := hdr.Get(api.RevisionHeader); h != strconv.FormatInt(lr.Revision, 10) {
		t.Fatalf("revision header %q, body %d", h, lr.Revision)
	}
	if len(lr.Items) != n {
		return state{iter: -1, gen: int64(len(lr.Items)), rev: lr.Revision}
	}
	var got *state
	for _, o := range lr.Items {
		it, err := strconv.Atoi(o.Metadata.Annotations[iterLabel])
		if err != nil {
			t.Fatalf("%s: annotation %q: %v", o.Key(), o.Metadata.Annotations[iterLabel], err)
		}
		port := o.Spec.(map[string]any)["ports"].([]any)[0].(map[string]any)["port"].(float64)
		s := state{iter: it, gen: o.Metadata.Generation, rev: o.Metadata.Revision}
		if int(port) != 10000+it {
			s.iter = -1
		}
		if got == nil {
			got = &s
		} else if *got != s {
			t.Logf("%s is %+v, another object is %+v", o.Key(), s, *got)
			return state{iter: -1, rev: lr.Revision}
		}
	}
	if got.rev != lr.Revision {
		// Objects at one revision, store at another: a half-written revision.
		return state{iter: -1, gen: got.gen, rev: lr.Revision}
	}
	return *got
}

// verify checks the store is exactly at want, including the history of a few
// objects (one entry per generation, ending at the current revision).
func (p *pilotProc) verify(t *testing.T, hc *http.Client, want state, n int) {
	t.Helper()
	if got := p.read(t, hc, n); got != want {
		t.Fatalf("store is %+v, want %+v\nlog:\n%s", got, want, p.log())
	}
	for _, i := range []int{0, n / 2, n - 1} {
		var hr api.HistoryResponse
		getJSON(t, hc, fmt.Sprintf("%s%s/namespaces/%s/services/svc-%d/history", p.url, api.Prefix, ns, i), &hr)
		if int64(len(hr.History)) != want.gen {
			t.Fatalf("svc-%d history has %d entries, want %d", i, len(hr.History), want.gen)
		}
		for j, h := range hr.History {
			if h.Generation != int64(j+1) || h.Op != "PUT" || (j > 0 && h.Revision <= hr.History[j-1].Revision) {
				t.Fatalf("svc-%d history entry %d is %+v", i, j, h)
			}
		}
		if last := hr.History[len(hr.History)-1]; last.Revision != want.rev {
			t.Fatalf("svc-%d last history revision %d, want %d", i, last.Revision, want.rev)
		}
	}
	if strings.Contains(p.log(), "panic") {
		t.Fatalf("pilot log shows a panic:\n%s", p.log())
	}
}
