package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/server"
)

// runRealPilot is the pilot child of -stack=real: the production pilot
// (server.Run with server.ServeADS: boltstore → meshcache → compile → gen →
// sidecar validation and manifest signing → ADS, status on the admin API). The
// mesh is seeded and changed through the admin API like an operator would. A
// side HTTP server gives the driver the same interface as the synthetic child:
// POST /change, GET /memstats, and /apis/status/ proxied to the admin API.
func runRealPilot(cfg pilotConfig) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "pilot", Level: hclog.Warn, Output: os.Stderr})
	dir, err := os.MkdirTemp("", "adsload-real-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lim := server.DefaultXDSLimits()
	lim.Debounce, lim.MaxDelay = cfg.debounce, 10*cfg.debounce
	lim.GenWorkers = 2
	// Every simulated client dials from 127.0.0.1 (one "identity" to the
	// per-address bound) and, with -sidecars, registers over plaintext.
	lim.MaxStreamsPerIdentity, lim.MaxReadOnlyStreams = 1<<30, 1<<30
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	adminc, xdsc := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{DataDir: dir, AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", XDSTLSAddr: "127.0.0.1:0", Logger: log, InsecurePlaintextRegistration: true,
			XDS: server.ServeADS(lim), OnReady: func(a net.Addr) { adminc <- a }, OnXDSReady: func(a net.Addr) { xdsc <- a },
			Status: server.StatusLimits{Retention: time.Minute, MaxDisconnected: 100_000, MaxRevisions: 64}})
	}()
	var admin, xds net.Addr
	for admin == nil || xds == nil {
		select {
		case admin = <-adminc:
		case xds = <-xdsc:
		case err := <-done:
			return fmt.Errorf("pilot stopped at start: %w", err)
		}
	}
	base := "http://" + admin.String()
	hc := &http.Client{Timeout: time.Minute}

	var seed strings.Builder
	for i := range cfg.services {
		svc := svcName(i)
		fmt.Fprintf(&seed, "---\n%s", serviceYAML(svc))
		for j := range 2 {
			fmt.Fprintf(&seed, "---\n%s", workloadYAML(svc, j, fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)))
		}
	}
	seeded, err := applyYAML(hc, base, seed.String())
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	// READY only once the seed is compiled, so the driver's "latest" is the seed.
	for deadline := time.Now().Add(time.Minute); ; {
		var rs struct {
			Revision int64 `json:"revision"`
		}
		if resp, err := hc.Get(base + "/apis/status/v1/revisions/latest"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&rs)
			resp.Body.Close()
		}
		if rs.Revision >= seeded {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("seed revision %d not compiled within a minute", seeded)
		}
		time.Sleep(20 * time.Millisecond)
	}

	target, err := url.Parse(base)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/apis/status/", httputil.NewSingleHostReverseProxy(target))
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("svc"))
		if err != nil || i < 0 || i >= cfg.services {
			http.Error(w, "svc: want an index", http.StatusBadRequest)
			return
		}
		svc := svcName(i)
		rev, err := applyYAML(hc, base, workloadYAML(svc, 0, r.URL.Query().Get("addr")))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"revision": rev, "cluster": clusterName(svc)})
	})
	mux.HandleFunc("GET /memstats", memstats)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	defer hs.Close()

	fmt.Printf("READY %s %s\n", xds, hl.Addr())
	buf := make([]byte, 1)
	_, _ = os.Stdin.Read(buf) // returns when the driver closes our stdin or exits
	cancel()
	return <-done
}

// serviceYAML is one bench Service: port 80 so its cluster is clusterName(svc).
func serviceYAML(svc string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: %s, namespace: bench}
spec:
  selector: {app: %s}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: HTTP}
`, svc, svc)
}

func workloadYAML(svc string, i int, addr string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: %s-%d, namespace: bench, labels: {app: %s}}
spec: {address: %s, serviceAccount: default}
`, svc, i, svc, addr)
}

// applyYAML applies documents through the admin API and returns the revision.
func applyYAML(hc *http.Client, base, yaml string) (int64, error) {
	resp, err := hc.Post(base+api.Prefix+"/apply", "application/yaml", bytes.NewReader([]byte(yaml)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("apply: %s: %s", resp.Status, b)
	}
	var ar api.ApplyResponse
	if err := json.Unmarshal(b, &ar); err != nil {
		return 0, err
	}
	return ar.Revision, nil
}
