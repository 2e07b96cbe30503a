package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weft-mesh/weft/conformance/pods"
)

// Pod mode (make demo-pods, --pods): the same path as part two, but in pods on
// one machine (conformance/pods: network namespaces on a bridge, cgroups) with
// transparent interception: the init step runs the real `sidecar intercept`, the
// sidecars run as uid 1337 with --intercept, and the frontend calls
// http://reviews.shop:9080/ with plain curl, by name, with no proxy settings.
// Needs root; cleans up after itself (and a later run sweeps what a killed one
// left).

const podsNamespace = "shop"

const podsMeshYAML = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  mtls: STRICT
`

// podMesh is the pod demo's state; close removes all of it.
type podMesh struct {
	ctx        context.Context
	bin        string
	mode       string // iptables | ebpf
	node       *pods.Node
	front, rev *pods.Pod
	pilot      *exec.Cmd
	pilotDone  chan error
	dataDir    string
	sidecars   map[string]*exec.Cmd
	logs       map[string]string
	srv        *http.Server
}

func runPods(ctx context.Context, bin, mode string) (err error) {
	if mode != "iptables" && mode != "ebpf" {
		return fmt.Errorf("--intercept %q: want iptables or ebpf", mode)
	}
	if err := pods.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, "sweeping an earlier run's pods:", err)
	}
	say("P1. Pod mode: a node (a network namespace with a bridge) and two pods of namespace %s, each its own network\n"+
		"    namespace with a veth to the bridge, an address, a cgroup and a resolv.conf (as a kubelet would make them)", podsNamespace)
	node, err := pods.New()
	if err != nil {
		return fmt.Errorf("pod mode needs root and network namespaces: %w", err)
	}
	m := &podMesh{ctx: ctx, bin: bin, mode: mode, node: node, sidecars: map[string]*exec.Cmd{}, logs: map[string]string{}}
	defer func() {
		if cerr := m.close(err != nil); cerr != nil && err == nil {
			err = cerr
		}
		fmt.Printf("\nStopped every process of the pod demo and removed its namespaces, cgroups and files (%s).\n", node.Name)
	}()
	if m.front, err = node.NewPod("frontend", podsNamespace); err != nil {
		return err
	}
	if m.rev, err = node.NewPod("reviews", podsNamespace); err != nil {
		return err
	}
	fmt.Printf("node %s: bridge %s (pilot listens there)\n", node.NS(), node.Gateway)
	for _, p := range []*pods.Pod{m.front, m.rev} {
		fmt.Printf("pod %-9s netns %s, eth0 %s and %s, cgroup %s\n", p.Name, p.NS(), p.IP, p.IP6, p.Cgroup)
	}
	fmt.Printf("pods' /etc/resolv.conf:\n%s", m.front.ResolvConf())

	say("P2. Start pilot in the node and apply Service reviews (no address given: pilot allocates its VIP) and STRICT mTLS")
	if err := m.startPilot(); err != nil {
		return err
	}
	meshFile := filepath.Join(node.Dir, "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte(podsMeshYAML), 0o600); err != nil {
		return err
	}
	if err := m.meshctl(nil, "apply", "-f", meshFile); err != nil {
		return err
	}
	if err := m.meshctl(nil, "get", "svc", "-n", podsNamespace); err != nil {
		return err
	}

	initArgs := []string{"intercept"}
	if mode == "ebpf" {
		say("P3. The reviews app listens on :9080 in its pod. The init step of each pod runs the real `sidecar intercept\n" +
			"    --mode ebpf`: only the inbound capture (to 15006); outbound and DNS are the sidecar's cgroup eBPF programs")
		initArgs = append(initArgs, "--mode", "ebpf")
	} else {
		say("P3. The reviews app listens on :9080 in its pod. The init step of each pod runs the real `sidecar intercept`\n" +
			"    (istio-init's part): outbound TCP to 15001, inbound to 15006, DNS to 15053, uid 1337 exempt")
	}
	if err := m.serveReviews(); err != nil {
		return err
	}
	for _, p := range []*pods.Pod{m.front, m.rev} {
		if err := m.show(p, filepath.Join(bin, "sidecar"), initArgs...); err != nil {
			return err
		}
	}
	if err := m.show(m.front, "sh", "-c", "iptables-save -t nat | grep -c WEFT_ | sed 's/$/ nat rules of ours in the frontend pod/'"); err != nil {
		return err
	}

	if mode == "ebpf" {
		say("P4. Start each pod's sidecar as uid 1337 with --intercept ebpf and the capabilities it needs (ambient\n" +
			"    net_admin, bpf, perfmon): it attaches the programs to its pod's cgroup; its own traffic is not redirected")
	} else {
		say("P4. Start each pod's sidecar as uid 1337 with --intercept iptables (its own traffic is not captured)")
	}
	for _, s := range []struct {
		p   *pods.Pod
		app string
	}{{m.front, "frontend"}, {m.rev, "reviews"}} {
		if err := m.startSidecar(s.p, s.app); err != nil {
			return err
		}
	}

	say("P5. From the frontend pod, plain curl by name: DNS answered by the frontend's sidecar (the VIP), the connection\n" +
		"    captured to its outbound listener, mTLS to the reviews sidecar (inbound capture), then the app")
	if err := m.waitCurl(m.front, "http://reviews.shop:9080/", "reviews saw 127.0.0.6"); err != nil {
		return err
	}
	if err := m.show(m.front, "getent", "hosts", "reviews.shop"); err != nil {
		return err
	}
	if err := m.show(m.front, "curl", "-sS", "--max-time", "5", "http://reviews.shop:9080/"); err != nil {
		return err
	}
	fmt.Println("The app saw 127.0.0.6: the reviews sidecar's inbound connection, not the frontend.")
	if err := m.showMode(); err != nil {
		return err
	}

	say("P6. Kill pilot (SIGKILL): the pods keep talking and the DNS proxy answers from the last-known-good")
	m.killPilot()
	if err := m.show(m.front, "curl", "-sS", "--max-time", "5", "http://reviews.shop:9080/"); err != nil {
		return err
	}

	say("P7. Remove the interception (sidecar intercept --remove) and stop the sidecars: traffic is direct again")
	for _, p := range []*pods.Pod{m.front, m.rev} {
		if err := m.show(p, filepath.Join(bin, "sidecar"), "intercept", "--remove"); err != nil {
			return err
		}
	}
	if err := m.stopSidecars(); err != nil {
		return err
	}
	if err := m.waitCurl(m.front, "http://"+m.rev.Addr(9080)+"/", "reviews saw "+m.front.IP.String()); err != nil {
		return err
	}
	return m.show(m.front, "curl", "-sS", "--max-time", "5", "http://"+m.rev.Addr(9080)+"/")
}

// showMode prints the frontend sidecar's interception metrics (read from the
// demo process inside the pod's network namespace: in eBPF mode a process of
// the pod's cgroup calling its own pod address is redirected too).
func (m *podMesh) showMode() error {
	url := "http://" + m.front.Addr(15000) + "/metrics"
	fmt.Printf("[frontend] GET %s:\n", url)
	resp, err := m.front.HTTPClient(requestTimeout).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "weft_interception_") && !strings.HasSuffix(l, " 0") {
			fmt.Println("  " + l)
		}
	}
	return nil
}

// show runs a command in pod p, printing it and its output.
func (m *podMesh) show(p *pods.Pod, bin string, args ...string) error {
	fmt.Printf("[%s]$ %s %s\n", p.Name, filepath.Base(bin), strings.Join(args, " "))
	out, err := p.Command(bin, args...).CombinedOutput()
	fmt.Print(string(out))
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Println()
	}
	if err != nil {
		return fmt.Errorf("%s %s in %s: %w", bin, strings.Join(args, " "), p.Name, err)
	}
	return nil
}

// waitCurl waits until curl in p answers a body with want.
func (m *podMesh) waitCurl(p *pods.Pod, url, want string) error {
	deadline := time.Now().Add(convergeTimeout)
	var last string
	for time.Now().Before(deadline) {
		if err := m.ctx.Err(); err != nil {
			return err
		}
		out, err := p.Command("curl", "-sS", "--max-time", "2", url).CombinedOutput()
		if err == nil && strings.Contains(string(out), want) {
			return nil
		}
		last = strings.TrimSpace(string(out))
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	return fmt.Errorf("curl %s in %s: no answer with %q within %s (last: %s)", url, p.Name, want, convergeTimeout, last)
}

// serveReviews runs the reviews app in the demo process, listening inside the
// reviews pod (sockets keep the namespace they were made in).
func (m *podMesh) serveReviews() error {
	var ln net.Listener
	if err := m.rev.Do(func() (err error) {
		ln, err = net.Listen("tcp", ":9080")
		return err
	}); err != nil {
		return fmt.Errorf("reviews app: %w", err)
	}
	m.srv = &http.Server{ReadHeaderTimeout: requestTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "reviews saw %s\n", strings.TrimPrefix(host, "::ffff:"))
	})}
	go func() { _ = m.srv.Serve(ln) }()
	fmt.Printf("reviews app listening on %s:9080 (and 127.0.0.1:9080, where its sidecar delivers)\n", m.rev.IP)
	return nil
}

// meshctl runs bin/meshctl in the node (pilot's admin API is loopback-only,
// in the node's namespace).
func (m *podMesh) meshctl(stdout io.Writer, args ...string) error {
	args = append([]string{"--pilot", "http://127.0.0.1:15014"}, args...)
	if stdout != io.Discard {
		fmt.Printf("[node]$ meshctl %s\n", strings.Join(args, " "))
	}
	cmd := m.node.Command(filepath.Join(m.bin, "meshctl"), args...)
	cmd.Stdout, cmd.Stderr = stdout, os.Stdout
	switch stdout {
	case nil:
		cmd.Stdout = os.Stdout
	case io.Discard: // a probe: quiet
		cmd.Stderr = io.Discard
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("meshctl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (m *podMesh) startPilot() error {
	m.dataDir = filepath.Join(m.node.Dir, "pilot-data")
	gw := m.node.Gateway.String()
	args := []string{"--data-dir", m.dataDir, "--admin-addr", "127.0.0.1:15014", "--xds-addr", gw + ":15010", "--xds-tls-addr", gw + ":15012", "--webhook-addr", gw + ":15017"}
	fmt.Printf("[node]$ pilot %s\n", strings.Join(args, " "))
	m.pilot = m.node.Command(filepath.Join(m.bin, "pilot"), args...)
	m.logs["pilot"] = filepath.Join(m.node.Dir, "pilot.log")
	logf, err := os.Create(m.logs["pilot"])
	if err != nil {
		return err
	}
	defer logf.Close()
	m.pilot.Stdout, m.pilot.Stderr = logf, logf
	if err := m.pilot.Start(); err != nil {
		return fmt.Errorf("starting pilot: %w", err)
	}
	m.pilotDone = make(chan error, 1)
	go func(c chan error, cmd *exec.Cmd) { c <- cmd.Wait() }(m.pilotDone, m.pilot)
	deadline := time.Now().Add(healthTimeout)
	for {
		err := m.meshctl(io.Discard, "get", "svc")
		if err == nil {
			break
		}
		select {
		case e := <-m.pilotDone:
			m.pilotDone <- e
			return fmt.Errorf("pilot exited: %v", e)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pilot not answering within %s: %w", healthTimeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	for _, f := range []string{"publisher.pub", "ca/root.pem"} {
		for deadline := time.Now().Add(healthTimeout); ; time.Sleep(20 * time.Millisecond) { // polling with a deadline
			if _, err := os.Stat(filepath.Join(m.dataDir, f)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pilot wrote no %s within %s", f, healthTimeout)
			}
		}
	}
	return nil
}

func (m *podMesh) killPilot() {
	if m.pilot == nil {
		return
	}
	fmt.Printf("[node]$ kill -9 %d\n", m.pilot.Process.Pid)
	_ = m.pilot.Process.Kill()
	<-m.pilotDone
	m.pilot = nil
}

// startSidecar starts app's sidecar in p as uid 1337, with a directory of its
// own holding its token and copies of pilot's publisher key and CA root (pilot's
// data directory is root's).
func (m *podMesh) startSidecar(p *pods.Pod, app string) error {
	run := p.As(pods.Proxy())
	if m.mode == "ebpf" {
		run = p.As(pods.Proxy("net_admin", "bpf", "perfmon"))
	}
	dir := filepath.Join(m.node.Dir, "sidecar-"+app)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	var tok strings.Builder
	if err := m.meshctl(&tok, "token", "create", "--namespace", podsNamespace, "--service-account", app, "--ttl", "1h"); err != nil {
		return err
	}
	files := map[string][]byte{"token": []byte(tok.String())}
	for name, src := range map[string]string{"publisher.pub": "publisher.pub", "root.pem": "ca/root.pem"} {
		b, err := os.ReadFile(filepath.Join(m.dataDir, src))
		if err != nil {
			return err
		}
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
		if err := run.Chown(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if err := run.Chown(dir); err != nil {
		return err
	}
	ip := p.IP.String()
	args := []string{"--node-id", app, "--namespace", podsNamespace, "--service-account", app, "--labels", "app=" + app,
		"--address", ip, "--pilot", m.node.Gateway.String() + ":15012", "--token-file", filepath.Join(dir, "token"),
		"--ca-root", filepath.Join(dir, "root.pem"), "--publisher-key", filepath.Join(dir, "publisher.pub"),
		"--state-dir", filepath.Join(dir, "state"), "--admin-addr", ip + ":15000",
		"--intercept", m.mode}
	fmt.Printf("[%s]$ setpriv %s sidecar %s\n", p.Name, strings.Join(run.User.Setpriv()[1:], " "), strings.Join(args, " "))
	cmd := run.Command(filepath.Join(m.bin, "sidecar"), args...)
	m.logs[app] = filepath.Join(m.node.Dir, app+".log")
	logf, err := os.Create(m.logs[app])
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s's sidecar: %w", app, err)
	}
	m.sidecars[app] = cmd
	return nil
}

// stopSidecars sends SIGTERM and waits for each sidecar to exit.
func (m *podMesh) stopSidecars() error {
	var errs []error
	for app, cmd := range m.sidecars {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("%s sidecar exited with %v", app, err))
			}
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-done
			errs = append(errs, fmt.Errorf("%s sidecar did not stop within %s of SIGTERM; killed", app, stopTimeout))
		}
		delete(m.sidecars, app)
	}
	return errors.Join(errs...)
}

// close stops everything and removes the node (its cgroups kill what is left);
// with failed, the logs are printed first.
func (m *podMesh) close(failed bool) error {
	if failed {
		for name, f := range m.logs {
			if b, err := os.ReadFile(f); err == nil {
				fmt.Printf("\n### %s log:\n%s", name, b)
			}
		}
	}
	errs := []error{m.stopSidecars()}
	if m.pilot != nil {
		errs = append(errs, stopPilot(m.pilot, m.pilotDone))
	}
	if m.srv != nil {
		_ = m.srv.Close()
	}
	errs = append(errs, m.node.Close())
	return errors.Join(errs...)
}
