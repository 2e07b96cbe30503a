package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/pilot/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigErrors(t *testing.T) {
	log := hclog.NewNullLogger()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     server.Config
		wantErr string
	}{
		{name: "no data dir", cfg: server.Config{Logger: log}, wantErr: "pilot config: DataDir (--data-dir) is required"},
		{name: "no logger", cfg: server.Config{DataDir: dir}, wantErr: "pilot config: a Logger is required"},
		{name: "remote without token file", cfg: server.Config{DataDir: dir, Logger: log, AdminAllowRemote: true},
			wantErr: "pilot config: --admin-allow-remote requires --admin-token-file"},
		{name: "missing token file", cfg: server.Config{DataDir: dir, Logger: log, AdminTokenFile: filepath.Join(dir, "nope")},
			wantErr: "reading admin token file: open " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{name: "empty token file", cfg: server.Config{DataDir: dir, Logger: log, AdminTokenFile: empty},
			wantErr: "admin token file " + empty + " is empty"},
		{name: "webhook without CA", cfg: server.Config{DataDir: dir, Logger: log, WebhookAddr: "127.0.0.1:0"},
			wantErr: "pilot config: the injection webhook (--webhook-addr) needs the mesh CA"},
		{name: "bad admin addr", cfg: server.Config{DataDir: dir, Logger: log, AdminAddr: "256.0.0.1:1"},
			wantErr: "admin listener on 256.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := server.Run(ctx, tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("Run error %v, want prefix %q", err, tt.wantErr)
			}
		})
	}
}

// TestRunServesAndStops starts pilot with an xDS hook on free ports, checks the
// admin API answers and the hook got the store and its listener, then cancels and
// expects a clean return (goleak checks nothing is left running).
func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan net.Addr, 1)
	xdsGot := make(chan string, 1)
	cfg := server.Config{
		DataDir:   t.TempDir(),
		AdminAddr: "127.0.0.1:0",
		XDSAddr:   "127.0.0.1:0",
		Logger:    hclog.NewNullLogger(),
		OnReady:   func(a net.Addr) { ready <- a },
		XDS: func(ctx context.Context, env server.XDSEnv) error {
			defer env.Listener.Close()
			if env.Store == nil || env.Registry == nil || env.Status == nil || env.DataDir == "" {
				return errors.New("xDS hook got a nil store, registry or status, or no data dir")
			}
			xdsGot <- env.Listener.Addr().String()
			<-ctx.Done()
			return nil
		},
	}
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg) }()

	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("pilot not ready after 10s")
	}
	select {
	case a := <-xdsGot:
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("xDS listener on %s", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("xDS hook not started after 10s")
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantBody := "ok\ninsecure-plaintext-registration: off (plaintext xDS clients may read, not register)\ntrust-domain: cluster.local\n"
	if resp.StatusCode != 200 || string(body) != wantBody || resp.Header.Get("X-Weft-Revision") != "0" {
		t.Errorf("healthz %d %q revision %q, want %q", resp.StatusCode, body, resp.Header.Get("X-Weft-Revision"), wantBody)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/healthz", nil)
	req.Header.Set("Accept", "application/json")
	if resp, err = (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	wantJSON := `{"insecure-plaintext-registration":"off (plaintext xDS clients may read, not register)","revision":"0","status":"ok","trust-domain":"cluster.local"}` + "\n"
	if string(body) != wantJSON || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("healthz JSON %q (%s), want %q", body, resp.Header.Get("Content-Type"), wantJSON)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return 15s after cancel")
	}
}

// TestXDSFailureStopsPilot: a failing xDS server takes pilot down with its error.
func TestXDSFailureStopsPilot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	boom := errors.New("boom")
	err := server.Run(ctx, server.Config{
		DataDir: t.TempDir(), AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", XDSTLSAddr: "127.0.0.1:0", Logger: hclog.NewNullLogger(),
		XDS: func(_ context.Context, env server.XDSEnv) error {
			env.Listener.Close()
			return boom
		},
	})
	if !errors.Is(err, boom) || err.Error() != "xDS: boom" {
		t.Errorf("Run error %v, want xDS: boom", err)
	}
}

// TestAdminPprof: Go's profiles are on the admin API only with AdminPprof.
func TestAdminPprof(t *testing.T) {
	for _, tt := range []struct {
		on   bool
		want int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		t.Run(fmt.Sprint(tt.on), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ready := make(chan net.Addr, 1)
			done := make(chan error, 1)
			go func() {
				done <- server.Run(ctx, server.Config{DataDir: t.TempDir(), AdminAddr: "127.0.0.1:0", Logger: hclog.NewNullLogger(),
					AdminPprof: tt.on, OnReady: func(a net.Addr) { ready <- a }})
			}()
			var addr net.Addr
			select {
			case addr = <-ready:
			case err := <-done:
				t.Fatalf("Run returned early: %v", err)
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr.String() + server.PprofPath + "cmdline")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET %scmdline with AdminPprof=%v: %d, want %d", server.PprofPath, tt.on, resp.StatusCode, tt.want)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run after cancel: %v", err)
			}
		})
	}
}
