package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profileSlice is the length of each CPU profile startProfiles takes:
// net/http/pprof's profile runs for a fixed time (a client that goes away
// gets nothing), so the rounds are covered by consecutive slices, which
// `go tool pprof` merges when given them all.
const profileSlice = 5 * time.Second

// startProfiles saves every replica's allocations so far and starts CPU
// profiles of it in profileSlice pieces until stop, which then saves the
// allocations again. Profiles go to dir: allocs-{before,after}-<replica>.pprof
// (compare them with pprof -diff_base; each is taken after a forced GC, as the
// runtime publishes allocations at the end of a cycle, so the rounds then
// start right after one) and cpu-<replica>-<slice>.pprof.
func startProfiles(ps []*pilotProc, dir string) (stop func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, p := range ps {
		if err := p.saveProfile("allocs?gc=1", filepath.Join(dir, fmt.Sprintf("allocs-before-%d.pprof", i))); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ps))
	done := make(chan struct{})
	for i, p := range ps {
		wg.Go(func() {
			errs[i] = p.cpuProfile(filepath.Join(dir, fmt.Sprintf("cpu-%d", i)), done)
		})
	}
	return func() error {
		close(done)
		wg.Wait()
		for i, p := range ps {
			if err := p.saveProfile("allocs?gc=1", filepath.Join(dir, fmt.Sprintf("allocs-after-%d.pprof", i))); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}

func (p *pilotProc) saveProfile(name, path string) error {
	resp, err := p.hc.Get(p.admin + "/debug/pprof/" + name)
	if err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	defer resp.Body.Close()
	return saveBody(resp, path)
}

// cpuProfile takes profileSlice CPU profiles one after the other until done
// is closed (the last one ends up to a slice later).
func (p *pilotProc) cpuProfile(prefix string, done <-chan struct{}) error {
	for k := 0; ; k++ {
		select {
		case <-done:
			return nil
		default:
		}
		if err := p.saveProfile(fmt.Sprintf("profile?seconds=%d", int(profileSlice/time.Second)), fmt.Sprintf("%s-%02d.pprof", prefix, k)); err != nil {
			return err
		}
	}
}

func saveBody(resp *http.Response, path string) error {
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", resp.Request.URL.Path, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
