// Command podbench is make bench's interception rows (issue #10): the real
// sidecars in pods (conformance/pods: network namespaces on a bridge, cgroups),
// reached by an unmodified client (wrk, in the client pod, calling the Service
// by name) through transparent interception, beside direct pod-to-pod, in one
// interleaved run:
//
//	pod-direct           wrk -> the server pod's app (no sidecar anywhere)
//	pod-onehop-iptables  wrk -> client sidecar (iptables outbound capture) -> app
//	pod-pair-iptables    wrk -> client sidecar -> mTLS -> server sidecar (iptables
//	                     inbound capture) -> app
//	pod-onehop-ebpf      as pod-onehop-iptables, the capture by cgroup eBPF
//	pod-pair-ebpf        as pod-pair-iptables, outbound by eBPF (inbound is
//	                     iptables in both modes, by design)
//
// Per round and row: wrk closed-loop for DURATION with CONNS connections
// (throughput, latency percentiles) and the CPU of the row's sidecars
// (/proc/<pid>/stat) per request. Needs root, wrk, and the binaries of make build
// (--bin). Everything it makes is removed at the end; a killed run's leftovers
// are swept by the next (pods.Sweep).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weft-mesh/weft/conformance/pods"
)

// Bounds of the setup.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

const ns = "bench"

func main() {
	bin := flag.String("bin", "bin", "directory of make build's binaries (pilot, sidecar, meshctl)")
	benchapp := flag.String("benchapp", "", "tools/bench/proxy/benchapp binary (default: built)")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	duration := flag.Duration("duration", 10*time.Second, "wrk duration per row and round")
	conns := flag.Int("conns", 32, "wrk connections")
	modes := flag.String("modes", "iptables,ebpf", "interception modes measured")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, *bin, *benchapp, *rounds, *duration, *conns, strings.Split(*modes, ","))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podbench:", err)
		os.Exit(1)
	}
}

// bench is the run's state.
type bench struct {
	ctx     context.Context
	bin     string
	node    *pods.Node
	procs   []*exec.Cmd
	logs    []string
	dataDir string
}

// row is one measured path: wrk in client to url, the CPU of sidecars counted.
type row struct {
	name     string
	client   *pods.Pod
	url      string
	sidecars []*exec.Cmd
}

func run(ctx context.Context, bin, benchapp string, rounds int, duration time.Duration, conns int, modes []string) (err error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("needs wrk (apt-get install -y wrk): %w", err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	if err := pods.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, "sweeping an earlier run:", err)
	}
	node, err := pods.New()
	if err != nil {
		return fmt.Errorf("needs root and network namespaces: %w", err)
	}
	b := &bench{ctx: ctx, bin: bin, node: node}
	defer func() {
		if cerr := b.close(err != nil); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if benchapp == "" {
		benchapp = filepath.Join(node.Dir, "benchapp")
		if out, err := exec.Command("go", "build", "-o", benchapp, "./tools/bench/proxy/benchapp").CombinedOutput(); err != nil {
			return fmt.Errorf("building benchapp: %v: %s", err, out)
		}
	}

	// The server pods: plain (no sidecar: direct and one-hop rows), and one with
	// a sidecar per mode (pair rows); a client pod per mode, and one for direct.
	plain, err := b.pod("server-plain")
	if err != nil {
		return err
	}
	if err := b.start(plain, pods.User{}, "app-plain", benchapp, "-listen", ":9080", "-size", "1024"); err != nil {
		return err
	}
	direct, err := b.pod("client-direct")
	if err != nil {
		return err
	}
	if err := b.startPilot(); err != nil {
		return err
	}
	mesh := fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: onehop, namespace: bench}
spec:
  selector: {app: onehop}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: server-plain, namespace: bench, labels: {app: onehop}}
spec: {address: %s, serviceAccount: server}
`, plain.IP)
	for _, m := range modes {
		mesh += fmt.Sprintf(`---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: pair-%[1]s, namespace: bench}
spec:
  selector: {app: pair-%[1]s}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: pair-%[1]s, namespace: bench}
spec:
  selector: {app: pair-%[1]s}
  mtls: STRICT
`, m)
	}
	if err := b.apply(mesh); err != nil {
		return err
	}
	rows := []row{{name: "pod-direct", client: direct, url: "http://" + plain.Addr(9080) + "/"}}
	for _, m := range modes {
		client, err := b.pod("client-" + m)
		if err != nil {
			return err
		}
		server, err := b.pod("server-" + m)
		if err != nil {
			return err
		}
		if err := b.start(server, pods.User{}, "app-"+m, benchapp, "-listen", ":9080", "-size", "1024"); err != nil {
			return err
		}
		cs, err := b.sidecar(client, "client", "client-"+m, m)
		if err != nil {
			return err
		}
		ss, err := b.sidecar(server, "pair-"+m, "server-"+m, m)
		if err != nil {
			return err
		}
		rows = append(rows,
			row{name: "pod-onehop-" + m, client: client, url: "http://onehop.bench:9080/", sidecars: []*exec.Cmd{cs}},
			row{name: "pod-pair-" + m, client: client, url: "http://pair-" + m + ".bench:9080/", sidecars: []*exec.Cmd{cs, ss}})
	}
	for _, r := range rows {
		if err := b.waitOK(r); err != nil {
			return err
		}
	}

	fmt.Printf("wrk -t2 -c%d -d%s --latency, 1 KiB answers, HTTP/1.1 keep-alive, the client calling the Service by name\n", conns, duration)
	type result struct{ rps, p50, p99, cpu float64 }
	all := map[string][]result{}
	for round := 1; round <= rounds; round++ {
		for _, r := range rows {
			before, err := cpu(r.sidecars)
			if err != nil {
				return err
			}
			out, err := r.client.Command("wrk", "-t2", fmt.Sprintf("-c%d", conns), "-d"+duration.String(), "--latency", r.url).CombinedOutput()
			if err != nil {
				return fmt.Errorf("wrk %s: %v: %s", r.name, err, out)
			}
			after, err := cpu(r.sidecars)
			if err != nil {
				return err
			}
			w, err := parseWrk(string(out))
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", r.name, err, out)
			}
			res := result{rps: w.rps, p50: w.p50, p99: w.p99}
			if w.requests > 0 {
				res.cpu = (after - before).Seconds() * 1e6 / float64(w.requests)
			}
			all[r.name] = append(all[r.name], res)
			fmt.Printf("round %d %-20s %9.0f rps  p50 %7.3f ms  p99 %7.3f ms  sidecar CPU %6.1f us/req  (non-2xx %d)\n",
				round, r.name, res.rps, res.p50, res.p99, res.cpu, w.errors)
		}
	}
	median := func(xs []float64) float64 {
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	fmt.Printf("\nmedians over %d rounds (the interception rows' cost is against pod-direct of the same run):\n", rounds)
	fmt.Printf("%-20s %9s %9s %9s %12s\n", "row", "rps", "p50 ms", "p99 ms", "CPU us/req")
	for _, r := range rows {
		var rps, p50, p99, c []float64
		for _, x := range all[r.name] {
			rps, p50, p99, c = append(rps, x.rps), append(p50, x.p50), append(p99, x.p99), append(c, x.cpu)
		}
		fmt.Printf("%-20s %9.0f %9.3f %9.3f %12.1f\n", r.name, median(rps), median(p50), median(p99), median(c))
	}
	return nil
}

// pod makes a pod of namespace bench.
func (b *bench) pod(name string) (*pods.Pod, error) { return b.node.NewPod(name, ns) }

// start runs a process in p as u, its output in a log file of the node's Dir.
func (b *bench) start(p *pods.Pod, u pods.User, name, bin string, args ...string) error {
	return b.launch(name, p.As(u).Command(bin, args...))
}

func (b *bench) launch(name string, cmd *exec.Cmd) error {
	logPath := filepath.Join(b.node.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	b.procs = append(b.procs, cmd)
	b.logs = append(b.logs, logPath)
	return nil
}

func (b *bench) meshctl(args ...string) ([]byte, error) {
	args = append([]string{"--pilot", "http://127.0.0.1:15014"}, args...)
	return b.node.Command(filepath.Join(b.bin, "meshctl"), args...).Output()
}

func (b *bench) startPilot() error {
	b.dataDir = filepath.Join(b.node.Dir, "pilot")
	gw := b.node.Gateway.String()
	pilot := b.node.Command(filepath.Join(b.bin, "pilot"), "--data-dir", b.dataDir, "--admin-addr", "127.0.0.1:15014",
		"--xds-addr", gw+":15010", "--xds-tls-addr", gw+":15012")
	if err := b.launch("pilot", pilot); err != nil {
		return err
	}
	return b.poll("pilot answering and its files written", func() error {
		if _, err := b.meshctl("get", "svc"); err != nil {
			return err
		}
		for _, f := range []string{"publisher.pub", "ca/root.pem"} {
			if _, err := os.Stat(filepath.Join(b.dataDir, f)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *bench) apply(yaml string) error {
	f := filepath.Join(b.node.Dir, "mesh.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		return err
	}
	if out, err := b.meshctl("apply", "-f", f); err != nil {
		return fmt.Errorf("meshctl apply: %v: %s", err, out)
	}
	return nil
}

// sidecar runs the init step (`sidecar intercept`) in p and starts its sidecar
// as uid 1337 in mode, labelled app=app, with an identity (mTLS to peers).
func (b *bench) sidecar(p *pods.Pod, app, node, mode string) (*exec.Cmd, error) {
	initArgs := []string{"intercept"}
	user := pods.Proxy()
	if mode == "ebpf" {
		initArgs = append(initArgs, "--mode", "ebpf")
		user = pods.Proxy("net_admin", "bpf", "perfmon")
	}
	if out, err := p.Command(filepath.Join(b.bin, "sidecar"), initArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("sidecar intercept in %s: %v: %s", p.Name, err, out)
	}
	run := p.As(user)
	dir := filepath.Join(b.node.Dir, "sidecar-"+node)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	tok, err := b.meshctl("token", "create", "--namespace", ns, "--service-account", app, "--ttl", "1h")
	if err != nil {
		return nil, fmt.Errorf("meshctl token create: %w", err)
	}
	files := map[string][]byte{"token": tok}
	for name, src := range map[string]string{"publisher.pub": "publisher.pub", "root.pem": "ca/root.pem"} {
		if files[name], err = os.ReadFile(filepath.Join(b.dataDir, src)); err != nil {
			return nil, err
		}
	}
	for name, c := range files {
		if err := os.WriteFile(filepath.Join(dir, name), c, 0o600); err != nil {
			return nil, err
		}
		if err := run.Chown(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	if err := run.Chown(dir); err != nil {
		return nil, err
	}
	ip := p.IP.String()
	cmd := run.Command(filepath.Join(b.bin, "sidecar"), "--node-id", node, "--namespace", ns, "--service-account", app,
		"--labels", "app="+app, "--address", ip, "--pilot", b.node.Gateway.String()+":15012",
		"--token-file", filepath.Join(dir, "token"), "--ca-root", filepath.Join(dir, "root.pem"),
		"--publisher-key", filepath.Join(dir, "publisher.pub"), "--state-dir", filepath.Join(dir, "state"),
		"--admin-addr", ip+":15000", "--intercept", mode)
	// The benchmarks' runtime setting (tools/bench/proxy/run.sh SIDECAR_GODEBUG).
	cmd.Env = append(os.Environ(), "GODEBUG=schedtrace=3600000")
	return cmd, b.launch("sidecar-"+node, cmd)
}

// waitOK waits until curl in r's client gets a 200 with 1024 bytes from r's URL.
func (b *bench) waitOK(r row) error {
	return b.poll(r.name+" answering 200 with 1024 bytes", func() error {
		out, err := r.client.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", "--max-time", "2", r.url).Output()
		if err != nil || string(out) != "200 1024" {
			return fmt.Errorf("curl %s: %q %v", r.url, out, err)
		}
		return nil
	})
}

// poll calls cond every 50ms until it holds or readyTimeout passes.
func (b *bench) poll(what string, cond func() error) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

// cpu is the user+system CPU time the processes used so far.
func cpu(ps []*exec.Cmd) (time.Duration, error) {
	var total time.Duration
	for _, p := range ps {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
		if err != nil {
			return 0, err
		}
		// Fields after the ")" of comm: state is 3rd field; utime, stime are 14th, 15th.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: %q", p.Process.Pid, s)
		}
		for _, v := range f[11:13] {
			ticks, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, err
			}
			total += time.Duration(ticks) * time.Second / 100 // USER_HZ
		}
	}
	return total, nil
}

type wrkResult struct {
	rps      float64
	p50, p99 float64 // ms
	requests int64
	errors   int64
}

// parseWrk reads wrk --latency's report.
func parseWrk(out string) (wrkResult, error) {
	var w wrkResult
	var okRPS, okP50, okP99 bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			w.rps, okRPS = v, err == nil
		case len(f) == 2 && f[0] == "50%":
			w.p50, okP50 = wrkMillis(f[1])
		case len(f) == 2 && f[0] == "99%":
			w.p99, okP99 = wrkMillis(f[1])
		case len(f) >= 2 && f[1] == "requests" && len(f) > 0:
			w.requests, _ = strconv.ParseInt(f[0], 10, 64)
		case len(f) == 4 && f[0] == "Non-2xx":
			w.errors, _ = strconv.ParseInt(f[3], 10, 64)
		}
	}
	if !okRPS || !okP50 || !okP99 || w.requests == 0 {
		return w, errors.New("no Requests/sec, 50%, 99% or request count in wrk's output")
	}
	return w, nil
}

// wrkMillis parses wrk's durations (812.00us, 1.20ms, 2.00s) into ms.
func wrkMillis(s string) (float64, bool) {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(v, 64)
			return x * u.ms, err == nil
		}
	}
	return 0, false
}

// close stops every process (SIGTERM, then the node's cgroups kill the rest)
// and removes the node; with failed, the logs' tails are printed first.
func (b *bench) close(failed bool) error {
	if failed {
		for _, l := range b.logs {
			if c, err := os.ReadFile(l); err == nil {
				if len(c) > 3000 {
					c = c[len(c)-3000:]
				}
				fmt.Fprintf(os.Stderr, "--- %s\n%s\n", filepath.Base(l), c)
			}
		}
	}
	var errs []error
	for _, p := range b.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range b.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopTimeout):
			_ = p.Process.Kill()
			<-done
			errs = append(errs, fmt.Errorf("%s did not stop within %s of SIGTERM", p.Path, stopTimeout))
		}
	}
	errs = append(errs, b.node.Close())
	return errors.Join(errs...)
}
