package certclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/certs/bundle"
	"github.com/weft-mesh/weft/sidecar/svid"
	"github.com/weft-mesh/weft/tools/testkit"
)

// TestPersistedCertificate: a certificate stored is written to the state
// directory (mode 0600) with its key; a client started with pilot away starts
// from it while it is good, and discards it (removing the file, saying why)
// when it is for another workload, outside its validity, not verified by the
// trust roots, readable by others, or not a certificate file.
func TestPersistedCertificate(t *testing.T) {
	c := newCA(t)
	p := startPilot(t, c, pilotID(t), time.Hour)
	tok := tokenFile(t, p, "shop", "reviews")
	dir := t.TempDir()
	cl, h := newClient(t, p, c.Bundle(), tok, func(cfg *Config) { cfg.StateDir = dir })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(ctx) }()
	path := filepath.Join(dir, FileName)
	testkit.Wait(t, 10*time.Second, func() error {
		if h.Load() == nil {
			return errors.New("no certificate yet")
		}
		if _, err := os.Stat(path); err != nil {
			return err
		}
		return nil
	})
	cancel()
	<-done
	held := h.Load()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != FileMode {
		t.Fatalf("persisted file: %v mode %v, want %v", err, fi.Mode().Perm(), FileMode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := svid.Parse(data); err != nil || s.Cert.Leaf.SerialNumber.Cmp(held.Cert.Leaf.SerialNumber) != 0 {
		t.Fatalf("persisted file holds %v (%v), want serial %s", s, err, held.Cert.Leaf.SerialNumber)
	}

	other := newCA(t)
	for _, tc := range []struct {
		name    string
		mut     func(*Config)
		mode    os.FileMode
		content []byte
		want    string // "" restored; else discarded for this reason
	}{
		{name: "restored while valid", want: ""},
		{name: "restored 1s before NotAfter", mut: func(cfg *Config) { cfg.Now = func() time.Time { return held.NotAfter.Add(-time.Second) } }},
		{name: "restored at NotAfter", mut: func(cfg *Config) { cfg.Now = func() time.Time { return held.NotAfter } }},
		{name: "1s past NotAfter", mut: func(cfg *Config) { cfg.Now = func() time.Time { return held.NotAfter.Add(time.Second) } }, want: "expired"},
		{name: "before NotBefore", mut: func(cfg *Config) { cfg.Now = func() time.Time { return held.NotBefore.Add(-time.Second) } }, want: "not valid before"},
		{name: "another workload", mut: func(cfg *Config) { cfg.ServiceAccount = "ratings" }, want: "this workload is spiffe://cluster.local/ns/shop/sa/ratings"},
		{name: "roots that no longer verify it", mut: func(cfg *Config) {
			cfg.Trust = func() (*bundle.Bundle, error) { return other.Bundle(), nil }
		}, want: "does not verify against the trust roots"},
		{name: "readable by others", mode: 0o640, want: "other users may read"},
		{name: "not a certificate file", content: []byte("junk"), want: "trailing data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			content, mode := data, tc.mode
			if tc.content != nil {
				content = tc.content
			}
			if mode == 0 {
				mode = FileMode
			}
			f := filepath.Join(d, FileName)
			if err := os.WriteFile(f, content, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, mode); err != nil { // past the umask
				t.Fatal(err)
			}
			var logs strings.Builder
			cl, h := newClient(t, p, c.Bundle(), tok, func(cfg *Config) {
				cfg.StateDir, cfg.Servers = d, []string{"127.0.0.1:1"} // pilot away
				cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs})
				if tc.mut != nil {
					tc.mut(cfg)
				}
			})
			restored := cl.restore(cl.cfg.Now())
			_, statErr := os.Stat(f)
			if tc.want == "" {
				if !restored || h.Load() == nil || h.Load().Cert.Leaf.SerialNumber.Cmp(held.Cert.Leaf.SerialNumber) != 0 || statErr != nil {
					t.Fatalf("not restored (%v, file %v): %s", restored, statErr, logs.String())
				}
				// Renewed on its own schedule, as if held since it was issued: at
				// once when that point has passed.
				now := cl.cfg.Now()
				want := RenewAt(held, held.NotBefore, cl.jitter)
				if want.Before(now) {
					want = now
				}
				if at := NextAttempt(h.Load(), cl.received, 0, cl.lastLifetime, now, cl.jitter); !at.Equal(want) {
					t.Errorf("renewal planned at %s, want %s", at, want)
				}
				return
			}
			if restored || h.Load() != nil {
				t.Fatal("restored a certificate that should have been discarded")
			}
			if !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("the discarded file is still there: %v", statErr)
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log %q does not say %q", logs.String(), tc.want)
			}
		})
	}
	// No file: nothing restored, nothing logged.
	var logs strings.Builder
	cl2, h2 := newClient(t, p, c.Bundle(), tok, func(cfg *Config) {
		cfg.StateDir, cfg.Logger = t.TempDir(), hclog.New(&hclog.LoggerOptions{Output: &logs})
	})
	if cl2.restore(time.Now()) || h2.Load() != nil || logs.Len() != 0 {
		t.Errorf("restore without a file: %q", logs.String())
	}
}
