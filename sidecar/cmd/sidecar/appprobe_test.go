package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// TestAppProbesServed: the real sidecar binary with WEFT_KUBE_APP_PROBERS (as
// injection sets it) answers /healthz/live and forwards the rewritten probe to
// the app on 127.0.0.1, before it has any configuration (no pilot reachable):
// an injected pod's application is probed from its first second.
func TestAppProbesServed(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer app.Close()
	u, _ := url.Parse(app.URL)
	port, _ := strconv.Atoi(u.Port())
	js, err := probe.Probers{probe.Key("web", probe.Liveness): {HTTPGet: &probe.HTTPGet{Path: "/healthz", Port: port}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(probe.EnvName, js)
	const ip = "127.93.21.1"
	s := proc.StartSidecar(t, proc.SidecarConfig{NodeID: "probed", Namespace: "shop", ServiceAccount: "web", Labels: map[string]string{"app": "web"},
		IP: ip, PlainPilot: "127.93.21.254:1", Extra: []string{"--insecure-skip-manifest"}})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	status := func(path string) (int, error) {
		resp, err := hc.Get("http://" + ip + ":15021" + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	testkit.Wait(t, 30*time.Second, func() error {
		select {
		case <-s.Exited():
			t.Fatalf("sidecar exited: %v\n%s", s.Err(), s.Logs.String())
		default:
		}
		if c, err := status("/healthz/live"); err != nil || c != http.StatusOK {
			return fmt.Errorf("/healthz/live: %d %v", c, err)
		}
		return nil
	})
	for path, want := range map[string]int{"/app-health/web/livez": http.StatusOK, "/app-health/web/readyz": http.StatusNotFound, "/healthz/ready": http.StatusServiceUnavailable} {
		if c, err := status(path); err != nil || c != want {
			t.Errorf("%s: %d %v, want %d", path, c, err, want)
		}
	}
}

// TestBadAppProbers: a WEFT_KUBE_APP_PROBERS the sidecar cannot read stops it
// at start with exit 2, naming the variable.
func TestBadAppProbers(t *testing.T) {
	bin := proc.Build(t, proc.Sidecar)
	cmd := exec.Command(bin, "--node-id", "n", "--namespace", "shop", "--service-account", "web", "--address", "127.93.21.2",
		"--pilot", "127.93.21.254:1", "--state-dir", t.TempDir(), "--insecure-skip-manifest")
	cmd.Env = append(cmd.Environ(), probe.EnvName+`={"/app-health/web/livez":{"httpGet":{"port":0}}}`)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), probe.EnvName+`["/app-health/web/livez"]: httpGet.port: 0 outside 1..65535`) {
		t.Fatalf("exit %v, output %q", err, out)
	}
}
