// Package etcdtest runs real etcd clusters for tests: each member is a real etcd
// server process (Debian's etcd 3.4 at Etcd34Binary, or etcd 3.7 built from
// go.etcd.io/etcd/server/v3's embed package by Etcd37Binary) on loopback ports,
// with its data in the test's temporary directory; the cluster is stopped and its
// data removed when the test ends. Processes run through tools/testkit/proc.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// Etcd34Binary is Debian 12's etcd-server (3.4), the one .ci/run installs.
const Etcd34Binary = "/usr/bin/etcd"

// StartTimeout bounds the wait for a started (or restarted) cluster to have a
// leader that every running member agrees on (generous: 2 shared cores).
const StartTimeout = 60 * time.Second

// Timing of the members: 4x etcd's defaults (100ms, 1s), because tests share two
// cores with builds and other tests; a 1s election timeout flaps under that load.
const (
	HeartbeatInterval = 400 * time.Millisecond
	ElectionTimeout   = 4 * time.Second
)

// Options configure Start. Zero values mean etcd's defaults.
type Options struct {
	Binary          string // default Etcd34Binary
	Members         int    // default 3
	MaxTxnOps       int    // --max-txn-ops (etcd default 128)
	MaxRequestBytes int    // --max-request-bytes (etcd default 1.5 MiB)
	// TLS serves clients over TLS and requires a client certificate
	// (Cluster.TLS has the files).
	TLS bool
}

// Cluster is a running etcd cluster.
type Cluster struct {
	Members   []*Member
	Endpoints []string  // client URLs, one per member
	TLS       *TLSFiles // with Options.TLS
	tlsConfig *tls.Config
	opts      Options
	t         testing.TB
}

// Member is one etcd server process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string
	args      []string

	mu     sync.Mutex // guards the fields below: Kill and Restart change them
	proc   *proc.Proc
	killed bool // by Kill, so its exit is not a failure
}

// Proc is the member's current process.
func (m *Member) Proc() *proc.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// RequireBinary returns bin, or skips the test when it is missing (failing
// instead when WEFT_REQUIRE_PRIVILEGED=1, as CI sets: there it must be installed).
func RequireBinary(t testing.TB, bin string) string {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("WEFT_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("etcd binary %s: %v (install etcd-server)", bin, err)
		}
		t.Skipf("etcd binary %s: %v (install etcd-server)", bin, err)
	}
	return bin
}

var build37 struct {
	once sync.Once
	path string
	err  error
}

// Etcd37Binary builds the etcd37 helper (etcd 3.7 through embed, a module of its
// own beside this file) once per test process, into the binaries' directory the
// checkout's test processes share (proc.GoBuild), and returns its path.
func Etcd37Binary(t testing.TB) string {
	t.Helper()
	build37.once.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			build37.err = errors.New("etcdtest: cannot locate the etcd37 module")
			return
		}
		build37.path, build37.err = proc.GoBuild("etcd37", filepath.Join(filepath.Dir(file), "etcd37"), nil, ".")
	})
	if build37.err != nil {
		t.Fatal(build37.err)
	}
	return build37.path
}

// Cleanup is called when the test process ends (it fits goleak.Cleanup); the
// etcd37 binary stays for the checkout's next test process (proc.GoBuild).
func Cleanup(int) {}

// freePorts returns n distinct free loopback TCP ports. Another process may take
// one before etcd binds it; Start then fails with etcd's bind error in the log.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// Start starts a cluster and waits until it has a leader; it is stopped and its
// data removed when the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Binary == "" {
		o.Binary = Etcd34Binary
	}
	if o.Members == 0 {
		o.Members = 3
	}
	RequireBinary(t, o.Binary)
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		t.Fatalf("etcdtest: free ports: %v", err)
	}
	c := &Cluster{opts: o, t: t}
	root := t.TempDir()
	scheme := "http"
	if o.TLS {
		c.TLS = newTLSFiles(t, root)
		c.tlsConfig = c.TLS.Config(t)
		scheme = "https"
	}
	var initial []string
	for i := range o.Members {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
		}
		c.Members = append(c.Members, m)
		c.Endpoints = append(c.Endpoints, m.ClientURL)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	token := fmt.Sprintf("weft-test-%d", ports[0])
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.Dir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token,
			"--initial-cluster-state", "new",
			"--heartbeat-interval", strconv.Itoa(int(HeartbeatInterval / time.Millisecond)),
			"--election-timeout", strconv.Itoa(int(ElectionTimeout / time.Millisecond)),
		}
		if o.MaxTxnOps != 0 {
			m.args = append(m.args, "--max-txn-ops", strconv.Itoa(o.MaxTxnOps))
		}
		if o.MaxRequestBytes != 0 {
			m.args = append(m.args, "--max-request-bytes", strconv.Itoa(o.MaxRequestBytes))
		}
		if c.TLS != nil {
			m.args = append(m.args, "--cert-file", c.TLS.serverCertFile, "--key-file", c.TLS.serverKeyFile,
				"--trusted-ca-file", c.TLS.CAFile, "--client-cert-auth")
		}
		if o.Binary == Etcd34Binary {
			m.args = append(m.args, "--logger", "zap", "--log-level", "error")
		}
		m.start(t, o.Binary)
	}
	c.WaitLeader(t)
	return c
}

func (m *Member) start(t testing.TB, bin string) {
	p := proc.Start(t, "etcd "+m.Name, bin, m.args...)
	p.Grace = 5 * time.Second
	m.mu.Lock()
	m.proc, m.killed = p, false
	m.mu.Unlock()
}

// Running reports whether the member's process is alive.
func (m *Member) Running() bool {
	select {
	case <-m.Proc().Exited():
		return false
	default:
		return true
	}
}

// Client is a client of every member, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(c.clientConfig(5 * time.Second))
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *Cluster) clientConfig(dial time.Duration) clientv3.Config {
	cfg := clientv3.Config{Endpoints: c.Endpoints, DialTimeout: dial, Logger: zap.NewNop()}
	if c.TLS != nil {
		cfg.TLS = c.tlsConfig
	}
	return cfg
}

// leader asks every running member for its status and returns the leader they
// all name, or an error saying what is missing.
func (c *Cluster) leader() (*Member, error) {
	cli, err := clientv3.New(c.clientConfig(2 * time.Second))
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var lead uint64
	var who *Member
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		}
		if st.Leader == 0 {
			return nil, fmt.Errorf("member %s has no leader", m.Name)
		}
		if lead != 0 && st.Leader != lead {
			return nil, fmt.Errorf("members disagree on the leader (%x, %x)", lead, st.Leader)
		}
		lead = st.Leader
		if st.Header.MemberId == st.Leader {
			who = m
		}
	}
	if who == nil {
		return nil, fmt.Errorf("leader %x is not a running member", lead)
	}
	return who, nil
}

// WaitLeader waits (StartTimeout) until the running members agree on a leader
// and returns it.
func (c *Cluster) WaitLeader(t testing.TB) *Member {
	t.Helper()
	var lead *Member
	testkit.Wait(t, StartTimeout, func() error {
		for _, m := range c.Members {
			select {
			case <-m.Proc().Exited():
				if !m.wasKilled() {
					t.Fatalf("etcd member %s exited: %v\n%s", m.Name, m.Proc().Err(), m.Proc().Logs.String())
				}
			default:
			}
		}
		var err error
		lead, err = c.leader()
		return err
	})
	return lead
}

func (m *Member) wasKilled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killed
}

// Kill SIGKILLs the member and waits for it to be gone.
func (m *Member) Kill(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	m.killed = true
	m.mu.Unlock()
	if err := m.Proc().Kill(); err != nil {
		t.Fatal(err)
	}
}

// Restart starts a killed member again on its data directory and waits until
// the cluster has a leader again.
func (c *Cluster) Restart(t testing.TB, m *Member) {
	t.Helper()
	if m.Running() {
		t.Fatalf("etcdtest: member %s is still running", m.Name)
	}
	m.start(t, c.opts.Binary)
	c.WaitLeader(t)
}
