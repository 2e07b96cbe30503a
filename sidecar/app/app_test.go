package app

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/certs/ca"
	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/tools/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestNextTick(t *testing.T) {
	tests := []struct {
		name   string
		states []staleness.State
		want   time.Duration
	}{
		{"nothing due", nil, time.Second},
		{"change sooner", []staleness.State{{Next: t0.Add(300 * time.Millisecond)}, {Next: t0.Add(700 * time.Millisecond)}}, 300 * time.Millisecond},
		{"change later", []staleness.State{{Next: t0.Add(5 * time.Second)}}, time.Second},
		{"past is ignored", []staleness.State{{Next: t0.Add(-time.Second)}}, time.Second},
		{"at least 1ms", []staleness.State{{Next: t0.Add(time.Microsecond)}}, time.Millisecond},
	}
	for _, tc := range tests {
		if got := nextTick(t0, tc.states, time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// settings for a sidecar on ip whose pilot (a closed port) never answers.
func settings(t *testing.T, ip string, extra ...string) *render.Settings {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "publisher.pub")
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.WritePublicKey(key, pub); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--node-id", "n1", "--namespace", "shop", "--service-account", "sa", "--address", ip,
		"--pilot", ip + ":1", "--publisher-key", key, "--state-dir", filepath.Join(dir, "state"),
		"--admin-addr", ip + ":15000", "--outbound-addr", ip + ":15001"}, extra...)
	s, err := render.Parse(args, func(string) ([]byte, error) { return nil, io.EOF })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRunRefusesToStart(t *testing.T) {
	log := hclog.NewNullLogger()
	busy, err := net.Listen("tcp", "127.77.9.2:15001")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		s    *render.Settings
		o    Options
		want string
	}{
		{"no logger", settings(t, "127.77.9.1"), Options{}, "sidecar: Options.Logger required"},
		{"LKG wait too long", settings(t, "127.77.9.1"), Options{Logger: log, LKGWait: time.Minute}, "sidecar: LKGWait 1m0s exceeds 10s"},
		{"memory release too often", settings(t, "127.77.9.1"), Options{Logger: log, MemoryRelease: 999 * time.Millisecond}, "sidecar: MemoryRelease 999ms outside [1s, 1h0m0s]"},
		{"memory release too rare", settings(t, "127.77.9.1"), Options{Logger: log, MemoryRelease: time.Hour + time.Second}, "sidecar: MemoryRelease 1h0m1s outside [1s, 1h0m0s]"},
		{"bad override", settings(t, "127.77.9.1", "--staleness", "routes=1s"), Options{Logger: log}, `sidecar: staleness[0]: "routes=1s": want CLASS=WARN/EXPIRE[/ONEXPIRE]`},
		{"port in use", settings(t, "127.77.9.2"), Options{Logger: log}, "sidecar: outbound listener: listen tcp 127.77.9.2:15001: bind: address already in use"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.s, tc.o)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Run = %v, want %q", err, tc.want)
			}
		})
	}
	// --intercept=ebpf that cannot be had (as root, or no such cgroup) fails the start.
	if err := Run(context.Background(), settings(t, "127.77.9.1", "--intercept", "ebpf", "--intercept-cgroup", "/nonexistent-weft"),
		Options{Logger: log}); err == nil || !strings.HasPrefix(err.Error(), "sidecar: --intercept=ebpf: ") {
		t.Fatalf("ebpf without eBPF: %v", err)
	}
	s := settings(t, "127.77.9.1")
	s.PublisherKey = filepath.Join(t.TempDir(), "missing.pub")
	if err := Run(context.Background(), s, Options{Logger: log}); err == nil || !strings.HasPrefix(err.Error(), "sidecar: publisher key: ") {
		t.Fatalf("missing key: %v", err)
	}
}

// Without pilot and without a snapshot the sidecar runs, says why it is not ready,
// refuses requests with a reason, and stops cleanly when its context ends.
func TestRunNotReadyWithoutPilot(t *testing.T) {
	s := settings(t, "127.77.9.3")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger(), TickInterval: 50 * time.Millisecond})
	}()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var code int
	var body string
	testkit.Wait(t, 10*time.Second, func() error {
		resp, err := hc.Get("http://" + netip.AddrPortFrom(s.ReadyAddr.Addr(), s.ReadyAddr.Port()).String() + "/healthz/ready")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		return nil
	})
	if code != http.StatusServiceUnavailable || body != "no configuration yet: waiting for pilot\n" {
		t.Fatalf("ready = %d %q", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.OutboundAddr.String()+"/", nil)
	req.Host = "reviews:9080"
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request without config = %d", resp.StatusCode)
	}
	// The refused request is counted on the admin endpoints (recorded just after
	// the answer is written, so poll).
	admin := "http://" + s.AdminAddr.String()
	for _, w := range []struct{ path, line string }{
		{"/metrics", `weft_sidecar_requests_total{cluster="none",code="503"} 1`},
		{"/stats", "cluster.none.rq_503: 1"},
		// The interception mode (explicit here), with the reason in config_dump.
		{"/metrics", `weft_interception_mode{mode="none"} 1`},
		{"/config_dump", `    "mode": "none",`},
	} {
		testkit.Wait(t, 5*time.Second, func() error {
			resp, err := hc.Get(admin + w.path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), w.line+"\n") {
				return fmt.Errorf("%s lacks %q:\n%s", w.path, w.line, b)
			}
			return nil
		})
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// Run releases memory every MemoryRelease (the smallest allowed here) and not
// at all when it is negative; the releasing goroutine stops with Run.
func TestRunReleasesMemory(t *testing.T) {
	tests := []struct {
		name  string
		ip    string
		every time.Duration
		want  int64 // at least this many releases
	}{
		{"every second", "127.77.9.4", MinMemoryRelease, 2},
		{"off", "127.77.9.5", -1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, settings(t, tc.ip), Options{Logger: hclog.NewNullLogger(), MemoryRelease: tc.every, release: func() { n.Add(1) }})
			}()
			if tc.want > 0 {
				// A loaded machine may run the ticker late. A miss is reported below,
				// after Run has stopped.
				_ = testkit.Poll(20*time.Second, func() error {
					if got := n.Load(); got < tc.want {
						return fmt.Errorf("%d releases", got)
					}
					return nil
				})
			} else {
				// Not a wait for a condition: a window, past two periods, in which no
				// release may happen.
				time.Sleep(2*MinMemoryRelease + 500*time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			got := n.Load()
			if tc.want == 0 && got != 0 || got < tc.want {
				t.Fatalf("%d releases, want %d", got, tc.want)
			}
		})
	}
}

// An activation releases memory at once; activations within MinMemoryRelease of
// a release are coalesced into one release when that time has passed.
func TestReleaseMemoryAfterActivation(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	releases := func() []time.Time { mu.Lock(); defer mu.Unlock(); return append([]time.Time(nil), at...) }
	activated := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		releaseMemory(ctx, MaxMemoryRelease, func() { mu.Lock(); at = append(at, time.Now()); mu.Unlock() }, activated)
	}()
	defer func() { cancel(); <-done }()

	activated <- struct{}{}
	testkit.Eventually(t, 10*time.Second, "a release after the first activation", func() bool { return len(releases()) == 1 })
	for range 3 { // coalesced: the signal channel holds one, the loop waits for the spacing
		activated <- struct{}{}
	}
	testkit.Eventually(t, 10*time.Second, "the coalesced release", func() bool { return len(releases()) >= 2 })
	got := releases()
	if gap := got[1].Sub(got[0]); gap < MinMemoryRelease {
		t.Fatalf("second release %s after the first, want >= %s", gap, MinMemoryRelease)
	}
	// Nothing more was pending: the next release is the next activation's, one
	// spacing after the second (an uncoalesced release would come sooner).
	activated <- struct{}{}
	testkit.Eventually(t, 10*time.Second, "the next activation's release", func() bool { return len(releases()) >= 3 })
	got = releases()
	if gap := got[2].Sub(got[1]); len(got) != 3 || gap < MinMemoryRelease {
		t.Fatalf("%d releases; third %s after the second, want 3 releases and >= %s", len(got), gap, MinMemoryRelease)
	}
}

// With --token-file and pilot unreachable, the sidecar starts, keeps asking for
// its certificate (counted in /metrics) and has no xDS stream.
func TestRunIdentityWaitsForCertificate(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	root := filepath.Join(dir, "root.pem")
	c, err := ca.Open(ca.Config{Dir: filepath.Join(dir, "ca"), TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, c.Bundle().PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte("not-a-real-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	ip := "127.77.9.7"
	s := settings(t, ip)
	s.TokenFile, s.CARoot = tok, root
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger()}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testkit.Wait(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + ip + ":15000/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `weft_sidecar_certificate_requests_total{credential="token",result="error"} 1`) {
			return fmt.Errorf("no failed token CSR counted yet")
		}
		if !strings.Contains(string(b), "weft_sidecar_xds_connected 0") {
			return fmt.Errorf("xDS connected without a certificate")
		}
		return nil
	})
}

// A --ca-root that no longer parses at start fails the start, naming the file.
func TestRunIdentityBadRoot(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	root := filepath.Join(dir, "root.pem")
	if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := settings(t, "127.77.9.8")
	s.TokenFile, s.CARoot = tok, root
	err := Run(context.Background(), s, Options{Logger: hclog.NewNullLogger()})
	if err == nil || !strings.Contains(err.Error(), "sidecar: identity: ca-root "+root) {
		t.Fatalf("err = %v", err)
	}
}
