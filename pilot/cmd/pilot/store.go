package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/etcdstore"
)

// storeFlags choose the store: the embedded boltstore (default) or etcd.
type storeFlags struct {
	kind          string
	endpoints     string
	ca, cert, key string
	cfg           etcdstore.Config
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "store", "bolt", "store backend: bolt (embedded, in --data-dir) or etcd (--etcd-endpoints; several pilot replicas may share it)")
	fs.StringVar(&f.endpoints, "etcd-endpoints", "", "--store etcd: comma-separated etcd client URLs (https:// with --etcd-ca)")
	fs.StringVar(&f.cfg.Prefix, "etcd-prefix", etcdstore.DefaultPrefix, "--store etcd: key prefix of this mesh's store (one store per prefix)")
	fs.StringVar(&f.ca, "etcd-ca", "", "--store etcd: PEM file of the roots that sign the etcd servers' certificates (turns on TLS)")
	fs.StringVar(&f.cert, "etcd-cert", "", "--store etcd: PEM client certificate for etcd (with --etcd-key)")
	fs.StringVar(&f.key, "etcd-key", "", "--store etcd: PEM private key of --etcd-cert")
	fs.DurationVar(&f.cfg.DialTimeout, "etcd-dial-timeout", etcdstore.DefaultDialTimeout, "--store etcd: bound on the first connection at start")
	fs.DurationVar(&f.cfg.RequestTimeout, "etcd-request-timeout", etcdstore.DefaultRequestTimeout,
		"--store etcd: bound on each etcd request pilot makes on its own and on a read's wait to catch up with the head")
	fs.DurationVar(&f.cfg.ApplyTimeout, "etcd-apply-timeout", etcdstore.DefaultApplyTimeout,
		"--store etcd: bound on one apply in all (staging, commit, retries); an etcd without quorum fails applies after it")
	fs.IntVar(&f.cfg.MaxTxnOps, "etcd-max-txn-ops", etcdstore.DefaultMaxTxnOps,
		"--store etcd: the etcd servers' --max-txn-ops (a large apply's commit holds 3 + its chunks)")
	fs.IntVar(&f.cfg.MaxRequestBytes, "etcd-max-request-bytes", etcdstore.DefaultMaxRequestBytes,
		"--store etcd: the etcd servers' --max-request-bytes (change sets above half a MiB are written in 1 MiB chunks; must be >= 1 MiB + 8 KiB)")
}

// open returns server.Config.OpenStore: nil for bolt.
func (f *storeFlags) open(fs *flag.FlagSet) (func(context.Context, hclog.Logger) (store.Store, error), error) {
	var etcdFlags []string // set on the command line
	fs.Visit(func(fl *flag.Flag) {
		if strings.HasPrefix(fl.Name, "etcd-") {
			etcdFlags = append(etcdFlags, "--"+fl.Name)
		}
	})
	switch f.kind {
	case "bolt":
		if len(etcdFlags) > 0 {
			return nil, fmt.Errorf("%s given with --store bolt (use --store etcd)", strings.Join(etcdFlags, ", "))
		}
		return nil, nil
	case "etcd":
	default:
		return nil, fmt.Errorf("--store %q is not bolt or etcd", f.kind)
	}
	if f.endpoints == "" {
		return nil, errors.New("--store etcd needs --etcd-endpoints")
	}
	cfg := f.cfg
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e == "" {
			return nil, fmt.Errorf("--etcd-endpoints %q has an empty endpoint", f.endpoints)
		}
		cfg.Endpoints = append(cfg.Endpoints, e)
	}
	if f.ca != "" || f.cert != "" || f.key != "" {
		tlsCfg, err := etcdstore.TLSConfig(f.ca, f.cert, f.key)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tlsCfg
	}
	return func(ctx context.Context, log hclog.Logger) (store.Store, error) {
		cfg := cfg
		cfg.Logger = log
		return etcdstore.Open(ctx, cfg)
	}, nil
}
