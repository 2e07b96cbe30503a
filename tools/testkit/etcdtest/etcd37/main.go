// Command etcd37 runs one etcd 3.7 member from go.etcd.io/etcd/server/v3's embed
// package, so Weft's tests can run a real 3.7 cluster beside Debian's etcd 3.4. It
// takes the subset of etcd's own flags the tests use (same names, same meaning) and
// is a module of its own so the server's dependencies stay out of Weft's go.mod.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd37:", err)
		os.Exit(1)
	}
}

func urls(s string) ([]url.URL, error) {
	var out []url.URL
	for _, p := range strings.Split(s, ",") {
		u, err := url.Parse(p)
		if err != nil {
			return nil, fmt.Errorf("url %q: %w", p, err)
		}
		out = append(out, *u)
	}
	return out, nil
}

func run() error {
	cfg := embed.NewConfig()
	var lpu, apu, lcu, acu string
	flag.StringVar(&cfg.Name, "name", "default", "member name")
	flag.StringVar(&cfg.Dir, "data-dir", "", "data directory")
	flag.StringVar(&lpu, "listen-peer-urls", "", "peer URLs to listen on")
	flag.StringVar(&apu, "initial-advertise-peer-urls", "", "peer URLs to advertise")
	flag.StringVar(&lcu, "listen-client-urls", "", "client URLs to listen on")
	flag.StringVar(&acu, "advertise-client-urls", "", "client URLs to advertise")
	flag.StringVar(&cfg.InitialCluster, "initial-cluster", "", "name=peerURL,...")
	flag.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "cluster token")
	state := flag.String("initial-cluster-state", "new", "new or existing")
	flag.UintVar(&cfg.MaxTxnOps, "max-txn-ops", cfg.MaxTxnOps, "max operations per txn")
	flag.UintVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "max request bytes")
	flag.StringVar(&cfg.ClientTLSInfo.CertFile, "cert-file", "", "client TLS certificate")
	flag.StringVar(&cfg.ClientTLSInfo.KeyFile, "key-file", "", "client TLS key")
	flag.StringVar(&cfg.ClientTLSInfo.TrustedCAFile, "trusted-ca-file", "", "client TLS CA")
	flag.BoolVar(&cfg.ClientTLSInfo.ClientCertAuth, "client-cert-auth", false, "require client certificates")
	hb := flag.Uint("heartbeat-interval", 100, "heartbeat interval (ms)")
	el := flag.Uint("election-timeout", 1000, "election timeout (ms)")
	flag.Parse()
	cfg.ClusterState = *state
	cfg.TickMs, cfg.ElectionMs = *hb, *el
	cfg.LogLevel = "error"
	var err error
	if cfg.ListenPeerUrls, err = urls(lpu); err != nil {
		return err
	}
	if cfg.AdvertisePeerUrls, err = urls(apu); err != nil {
		return err
	}
	if cfg.ListenClientUrls, err = urls(lcu); err != nil {
		return err
	}
	if cfg.AdvertiseClientUrls, err = urls(acu); err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd37: ready")
	case <-time.After(60 * time.Second):
		return fmt.Errorf("member %s not ready after 60s", cfg.Name)
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}
