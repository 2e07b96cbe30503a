package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/store/boltstore"
	"github.com/weft-mesh/weft/pilot/xds/ads"
	"github.com/weft-mesh/weft/pilot/xds/meshcache"
)

// pilotConfig is what the driver passes to the pilot child.
type pilotConfig struct {
	services int
	debounce time.Duration
}

func workload(svc string, i int, addr string) *resource.Object {
	return &resource.Object{APIVersion: resource.APIVersion, Kind: resource.KindWorkload,
		Metadata: resource.Metadata{Name: fmt.Sprintf("%s-%d", svc, i), Namespace: "bench", Labels: map[string]string{"app": svc}},
		Spec:     &resource.WorkloadSpec{Address: addr, ServiceAccount: "default", Weight: 1}}
}

func svcName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// runPilot runs store + meshcache + status + ADS in this process (the pilot child)
// and prints "READY <ads addr> <http addr>" once serving. It stops when stdin
// closes (the driver exited).
func runPilot(cfg pilotConfig) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "pilot", Level: hclog.Warn, Output: os.Stderr})
	dir, err := os.MkdirTemp("", "adsload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := boltstore.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var muts []store.Mutation
	for i := range cfg.services {
		for j := range 2 {
			muts = append(muts, store.Mutation{Op: store.OpPut, Object: workload(svcName(i), j, fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1))})
		}
	}
	for len(muts) > 0 {
		n := min(len(muts), store.MaxMutationsPerApply)
		if _, err := st.Apply(ctx, muts[:n]); err != nil {
			return fmt.Errorf("seed store: %w", err)
		}
		muts = muts[n:]
	}

	tracker, err := status.New(status.Config{Logger: log.Named("status"), Registerer: prometheus.NewRegistry(),
		Retention: time.Minute, MaxDisconnected: 100000, MaxRevisions: 64})
	if err != nil {
		return err
	}
	sy := newSynth()
	cache, err := meshcache.New(meshcache.Config{Store: st, Logger: log.Named("meshcache"), Debounce: cfg.debounce, MaxDelay: 10 * cfg.debounce,
		GenWorkers: 2, Compile: sy.compile, Generate: sy.generate, OnCompiled: tracker.RevisionWritten})
	if err != nil {
		return err
	}
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	srv, err := ads.New(ads.Config{Logger: log.Named("ads"), Status: tracker,
		Source: ads.SourceFunc(func(n *node.Node) (ads.Watch, error) {
			p, err := cache.Connect(n)
			if err != nil {
				return nil, err
			}
			return p, nil
		}),
		MaxUnacked: 64, SendTimeout: 30 * time.Second, RecvQueue: 16, MaxSubscriptions: ads.DefaultMaxSubscriptions, MaxReadOnlySubscriptions: ads.DefaultMaxSubscriptions, DiffCacheEntries: 4096,
		// Every simulated client dials from 127.0.0.1 and registers over plaintext.
		TrustDomain: "cluster.local", PlaintextRegistration: true, MaxStreamsPerIdentity: 1 << 30, MaxReadOnlyStreams: 1 << 30, MaxResourceNameBytes: ads.DefaultMaxResourceNameBytes})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	mux := http.NewServeMux()
	mux.Handle("/apis/status/", tracker.Handler())
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("svc"))
		if err != nil || i < 0 || i >= cfg.services {
			http.Error(w, "svc: want an index", http.StatusBadRequest)
			return
		}
		addr := r.URL.Query().Get("addr")
		res, err := st.Apply(r.Context(), []store.Mutation{{Op: store.OpPut, Object: workload(svcName(i), 0, addr)}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"revision": res.Revision, "cluster": clusterName(svcName(i))})
	})
	mux.HandleFunc("GET /memstats", memstats)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	defer hs.Close()

	fmt.Printf("READY %s %s\n", lis.Addr(), hl.Addr())
	buf := make([]byte, 1)
	_, _ = os.Stdin.Read(buf) // returns when the driver closes our stdin or exits
	cancel()
	return <-cacheDone
}

// memstats answers the child's heap in use and goroutines after forcing GC;
// ?free=1 also returns freed pages to the OS so RSS shows the live footprint.
func memstats(w http.ResponseWriter, r *http.Request) {
	// Twice: pooled buffers survive one GC in sync.Pool's victim cache.
	runtime.GC()
	runtime.GC()
	if r.URL.Query().Get("free") != "" {
		debug.FreeOSMemory()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = json.NewEncoder(w).Encode(map[string]any{"heapInuse": ms.HeapInuse, "goroutines": runtime.NumGoroutine()})
}
