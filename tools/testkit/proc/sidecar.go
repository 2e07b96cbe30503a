package proc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/tools/testkit"
)

// TokenTimeout bounds MintToken's request to pilot's admin API.
const TokenTimeout = 10 * time.Second

// MintToken asks pilot's admin API (POST /apis/ca/v1/tokens) for a bootstrap
// token naming ns and sa, valid for ttl (0: pilot's default), and returns it.
func MintToken(t testing.TB, p *PilotProcess, ns, sa string, ttl time.Duration) string {
	t.Helper()
	body := map[string]string{"namespace": ns, "serviceAccount": sa}
	if ttl > 0 {
		body["ttl"] = ttl.String()
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	hc := httpClient(p.Netns, TokenTimeout)
	resp, err := hc.Post(p.URL()+"/apis/ca/v1/tokens", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("proc: minting a token for %s/%s: %v", ns, sa, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		t.Fatalf("proc: minting a token for %s/%s: %v", ns, sa, err)
	}
	if resp.StatusCode/100 != 2 {
		t.Fatalf("proc: minting a token for %s/%s: %s: %s", ns, sa, resp.Status, out)
	}
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(out, &tok); err != nil || tok.Token == "" {
		t.Fatalf("proc: minting a token for %s/%s: answer %q has no token (%v)", ns, sa, out, err)
	}
	return tok.Token
}

// IdentityFlags are the sidecar flags for a workload identity from pilot p: a
// token for ns/sa minted through p's admin API (ttl 0: pilot's default) in a
// file under dir, --ca-root p's CA root and --pilot p's TLS xDS address.
// Appended after a sidecar's other flags they override its --pilot.
func IdentityFlags(t testing.TB, p *PilotProcess, dir, ns, sa string, ttl time.Duration) []string {
	t.Helper()
	f := filepath.Join(dir, "token-"+ns+"-"+sa)
	if err := os.WriteFile(f, []byte(MintToken(t, p, ns, sa, ttl)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--token-file", f, "--ca-root", p.CARootFile(), "--pilot", p.XDSTLSAddr()}
}

// SidecarConfig describes one sidecar process for StartSidecar.
type SidecarConfig struct {
	NodeID, Namespace, ServiceAccount string
	Labels                            map[string]string // app=... at least, for pilot to select it
	IP                                string            // loopback address of its own (inbound, ready)
	StateDir                          string            // default: a fresh temp dir
	// Identity: with a pilot, the sidecar gets a token for its namespace and
	// service account and talks mTLS to p; nil pilot means plaintext to
	// PlainPilot (an xDS address).
	Pilot      *PilotProcess
	PlainPilot string
	TokenTTL   time.Duration
	// Extra flags, after the others (they win).
	Extra []string
	// Intercept, when set (iptables, ebpf, auto), is the sidecar's --intercept:
	// then the outbound listener is the mode's default (loopback :15001, where
	// the capture delivers), not IP:15001.
	Intercept string
	// Netns: the sidecar runs inside it (a pod, as the pod's proxy user:
	// pods.Pod.As); its files (state, token, and copies of pilot's publisher
	// key and CA root, taken at start) are in a directory of Netns.TempDir. Nil: here.
	Netns Netns
}

// SidecarProcess is a running bin/sidecar.
type SidecarProcess struct {
	*Proc
	Config SidecarConfig
}

// AdminURL is the sidecar's admin address (IP:15000).
func (s *SidecarProcess) AdminURL() string { return "http://" + s.Config.IP + ":15000" }

// OutboundAddr is the sidecar's outbound listener (IP:15001; 127.0.0.1:15001
// with Intercept).
func (s *SidecarProcess) OutboundAddr() string {
	if s.Config.Intercept != "" {
		return "127.0.0.1:15001"
	}
	return s.Config.IP + ":15001"
}

// InboundAddr is the sidecar's inbound listener (IP:15006).
func (s *SidecarProcess) InboundAddr() string { return s.Config.IP + ":15006" }

// ReadyURL is the sidecar's readiness probe.
func (s *SidecarProcess) ReadyURL() string { return "http://" + s.Config.IP + ":15021/healthz/ready" }

// StartSidecar builds and starts bin/sidecar as cfg says: with cfg.Pilot, an
// identity (IdentityFlags) and the publisher key pilot wrote; it does not
// wait for readiness (tests wait on what they need).
func StartSidecar(t testing.TB, cfg SidecarConfig) *SidecarProcess {
	t.Helper()
	dir := t.TempDir()
	if cfg.Netns != nil {
		dir = cfg.Netns.TempDir(t)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	var labels []string
	for k, v := range cfg.Labels {
		labels = append(labels, k+"="+v)
	}
	args := []string{"--node-id", cfg.NodeID, "--namespace", cfg.Namespace, "--service-account", cfg.ServiceAccount,
		"--labels", strings.Join(labels, ","), "--address", cfg.IP, "--state-dir", cfg.StateDir,
		"--admin-addr", cfg.IP + ":15000"}
	if cfg.Intercept != "" {
		args = append(args, "--intercept", cfg.Intercept)
	} else {
		args = append(args, "--outbound-addr", cfg.IP+":15001")
	}
	switch {
	case cfg.Pilot != nil && cfg.Netns != nil:
		// The sidecar (another user, maybe) cannot read pilot's 0700 data
		// directory: it gets copies, and its token, in its own.
		id := IdentityFlags(t, cfg.Pilot, dir, cfg.Namespace, cfg.ServiceAccount, cfg.TokenTTL)
		key := copyTo(t, cfg.Netns, cfg.Pilot.KeyFile(), filepath.Join(dir, "publisher.pub"))
		root := copyTo(t, cfg.Netns, cfg.Pilot.CARootFile(), filepath.Join(dir, "root.pem"))
		if err := cfg.Netns.Chown(id[1]); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--publisher-key", key, "--token-file", id[1], "--ca-root", root, "--pilot", cfg.Pilot.XDSTLSAddr())
	case cfg.Pilot != nil:
		args = append(args, "--publisher-key", cfg.Pilot.KeyFile())
		args = append(args, IdentityFlags(t, cfg.Pilot, dir, cfg.Namespace, cfg.ServiceAccount, cfg.TokenTTL)...)
	case cfg.PlainPilot != "":
		args = append(args, "--pilot", cfg.PlainPilot)
	default:
		t.Fatal("proc: StartSidecar needs Pilot or PlainPilot")
	}
	args = append(args, cfg.Extra...)
	return &SidecarProcess{Proc: StartIn(t, cfg.Netns, "sidecar "+cfg.NodeID, Build(t, Sidecar), args...), Config: cfg}
}

// copyTo copies the file from (waiting for it: pilot writes its CA root a
// moment after it is up) to to, owned by ns's user, and returns to.
func copyTo(t testing.TB, ns Netns, from, to string) string {
	t.Helper()
	var b []byte
	testkit.Wait(t, PilotStartTimeout, func() (err error) {
		b, err = os.ReadFile(from)
		return err
	})
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ns.Chown(to); err != nil {
		t.Fatal(err)
	}
	return to
}

// ErrNoMetric is Metric's error when /metrics has no sample with the prefix.
var ErrNoMetric = errors.New("no metric")

// Metric returns the first sample line of /metrics starting with prefix
// (e.g. `weft_sidecar_certificate_state{state="valid"}`), or an error.
func (s *SidecarProcess) Metric(prefix string) (string, error) {
	hc := httpClient(s.Config.Netns, 5*time.Second)
	resp, err := hc.Get(s.AdminURL() + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l, nil
		}
	}
	return "", fmt.Errorf("%w %s", ErrNoMetric, prefix)
}

// MetricValue is the value of Metric(prefix)'s sample, or 0 and an error when
// there is none or it is not a number.
func (s *SidecarProcess) MetricValue(prefix string) (float64, error) {
	l, err := s.Metric(prefix)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
	if err != nil {
		return 0, fmt.Errorf("metric %q: %w", l, err)
	}
	return v, nil
}
