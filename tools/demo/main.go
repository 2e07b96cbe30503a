// Command demo is `make demo`. Part one starts pilot on a temporary data directory
// and a free loopback port, walks through apply / get / change / history / stale
// If-Match with meshctl, explaining each step, then stops pilot. Part two (mesh.go)
// runs a real mesh on loopback addresses: pilot serving xDS and three workloads,
// each an application and a sidecar; a weighted route, a route change converging,
// pilot killed with traffic still flowing, proxy-status after pilot restarts.
// It expects bin/pilot, bin/sidecar and bin/meshctl (make build), cleans up after
// itself and exits non-zero if any step does not behave as described. With
// --pods (make demo-pods, root) it runs the pod mode of pods.go instead: the mesh
// in network namespaces, reached by name through transparent interception.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	healthTimeout = 20 * time.Second
	stopTimeout   = 15 * time.Second
)

const reviewsV2 = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 8080, protocol: HTTP}
`

const reviewsV3 = `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 7070, protocol: HTTP}
`

func main() {
	bin := flag.String("bin", "bin", "directory holding pilot and meshctl")
	examples := flag.String("examples", "examples", "directory of example resources")
	podMode := flag.Bool("pods", false, "pod mode only (root): the mesh in network namespaces with transparent interception (pods.go)")
	intercept := flag.String("intercept", "iptables", "pod mode's interception: iptables or ebpf")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var err error
	if *podMode {
		var abs string
		if abs, err = filepath.Abs(*bin); err == nil {
			err = runPods(ctx, abs, *intercept)
		}
	} else if err = run(ctx, *bin, *examples); err == nil {
		var abs string
		if abs, err = filepath.Abs(*bin); err == nil {
			err = runMesh(ctx, abs)
		}
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	ctx     context.Context
	meshctl string
	pilot   string // URL
}

func say(format string, args ...any) {
	fmt.Printf("\n### "+format+"\n", args...)
}

// step runs meshctl with args, shows the command and its output, and checks the
// exit code is the expected one.
func (d *demo) step(wantCode int, args ...string) error {
	fmt.Printf("$ meshctl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(d.ctx, d.meshctl, append([]string{"--pilot", d.pilot}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return fmt.Errorf("meshctl %s: %w", strings.Join(args, " "), err)
	}
	fmt.Printf("(exit code %d)\n", code)
	if code != wantCode {
		return fmt.Errorf("meshctl %s: exit code %d, expected %d", strings.Join(args, " "), code, wantCode)
	}
	return nil
}

func run(ctx context.Context, bin, examples string) (err error) {
	pilotBin, err := filepath.Abs(filepath.Join(bin, "pilot"))
	if err != nil {
		return err
	}
	meshctlBin, err := filepath.Abs(filepath.Join(bin, "meshctl"))
	if err != nil {
		return err
	}
	for _, b := range []string{pilotBin, meshctlBin} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (run make build first)", err)
		}
	}
	tmp, err := os.MkdirTemp("", "weft-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = rerr
		}
		fmt.Printf("\nRemoved the temporary directory %s.\n", tmp)
	}()

	addr, err := freePort()
	if err != nil {
		return err
	}
	dataDir := filepath.Join(tmp, "data")
	logPath := filepath.Join(tmp, "pilot.log")
	say("1. Start pilot (the control plane) with its store in a temporary directory")
	fmt.Printf("$ pilot --data-dir %s --admin-addr %s\n", dataDir, addr)
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	pilot := exec.Command(pilotBin, "--data-dir", dataDir, "--admin-addr", addr, "--xds-addr", "127.0.0.1:0", "--xds-tls-addr", "127.0.0.1:0", "--webhook-addr", "127.0.0.1:0")
	pilot.Stdout, pilot.Stderr = logf, logf
	if err := pilot.Start(); err != nil {
		return fmt.Errorf("starting pilot: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- pilot.Wait() }()
	defer func() {
		if serr := stopPilot(pilot, exited); serr != nil && err == nil {
			err = serr
		}
		if b, rerr := os.ReadFile(logPath); rerr == nil {
			fmt.Printf("\n### pilot's log (hclog, structured):\n%s", b)
		}
	}()
	url := "http://" + addr
	if err := waitHealthy(ctx, url, exited); err != nil {
		return err
	}
	fmt.Printf("pilot answers on %s/healthz; the admin API only accepts loopback clients.\n", url)

	d := &demo{ctx: ctx, meshctl: meshctlBin, pilot: url}
	say("2. Validate the example resources offline: strict decoding, defaults, limits, cross-object checks")
	if err := d.step(0, "validate", "-f", examples); err != nil {
		return err
	}
	say("3. An invalid file is refused with one line per error, naming kind/namespace/name and the field")
	if err := d.step(1, "validate", "-f", filepath.Join(examples, "invalid", "route-bad-regex.yaml")); err != nil {
		return err
	}
	say("4. Apply the whole directory: every object lands in ONE store revision, or none does")
	if err := d.step(0, "apply", "-f", examples); err != nil {
		return err
	}
	say("5. Read them back: each object has a generation (its own change count) and the store revision of its last change")
	if err := d.step(0, "get", "services", "-n", "shop"); err != nil {
		return err
	}
	if err := d.step(0, "get", "service", "reviews", "-n", "shop", "-o", "yaml"); err != nil {
		return err
	}
	v2 := filepath.Join(tmp, "reviews-v2.yaml")
	v3 := filepath.Join(tmp, "reviews-v3.yaml")
	if err := os.WriteFile(v2, []byte(reviewsV2), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(v3, []byte(reviewsV3), 0o600); err != nil {
		return err
	}
	say("6. Change one object (targetPort 9080 -> 8080), guarded by --if-match on its current generation 1")
	if err := d.step(0, "apply", "-f", v2, "--if-match", "1"); err != nil {
		return err
	}
	say("7. History: one line per revision that touched the object (REV  OP  GENERATION  TIME)")
	if err := d.step(0, "history", "service", "reviews", "-n", "shop"); err != nil {
		return err
	}
	say("8. A stale writer still believes generation 1: pilot refuses with 412 and meshctl exits 3")
	if err := d.step(3, "apply", "-f", v3, "--if-match", "1"); err != nil {
		return err
	}
	say("9. Nothing changed: reviews is still at generation 2 with targetPort 8080")
	if err := d.step(0, "get", "service", "reviews", "-n", "shop", "-o", "yaml"); err != nil {
		return err
	}
	say("10. Objects that do not exist answer 404 and meshctl exits 4")
	if err := d.step(4, "get", "route", "nope", "-n", "shop"); err != nil {
		return err
	}
	say("11. Stop pilot (SIGTERM: graceful shutdown) and remove the temporary data directory")
	return nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitHealthy(ctx context.Context, url string, exited chan error) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(healthTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("pilot exited before becoming healthy: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := hc.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pilot not healthy on %s after %v", url, healthTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func stopPilot(p *exec.Cmd, exited chan error) error {
	_ = p.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("pilot exited with %v", err)
		}
		fmt.Println("pilot stopped cleanly.")
		return nil
	case <-time.After(stopTimeout):
		_ = p.Process.Kill()
		<-exited
		return fmt.Errorf("pilot did not stop within %v of SIGTERM; killed", stopTimeout)
	}
}
