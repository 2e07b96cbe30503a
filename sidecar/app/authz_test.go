package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/tools/testkit"
)

// TestSightingsSurviveRestart: sightings are written after a commit and a new
// State restored from them keeps the first sighting (no new TTL).
func TestSightingsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := authz.NewState()
	if err := restoreSightings(dir, st, t0); err != nil {
		t.Fatalf("first start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); persistSightings(ctx, dir, st, hclog.NewNullLogger()) }()
	defer func() { cancel(); wg.Wait() }()
	o := authz.Override{Name: "shop/block", TTL: 2 * time.Second, Revision: 3}
	cfg := authz.Config{Filters: []authz.Filter{{Name: "weft.override", Override: true, Rules: &authz.Rules{Action: authz.Deny,
		Policies: []authz.Policy{{Name: o.Name, Permissions: []authz.Permission{{Kind: authz.PermissionAny}}, Principals: []authz.Principal{{Kind: authz.PrincipalAny}}}}}}},
		Overrides: []authz.Override{o}}
	e, err := authz.New(cfg, st, t0)
	if err != nil {
		t.Fatal(err)
	}
	st.Commit(t0, e)
	path := filepath.Join(dir, SightingsFile)
	testkit.Eventually(t, 5*time.Second, "sightings file written", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), `"shop/block"`)
	})
	// Restart 1.5s later: the override has 0.5s left, not a new 2s.
	st2 := authz.NewState()
	if err := restoreSightings(dir, st2, t0.Add(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	e2, err := authz.New(cfg, st2, t0.Add(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if dl, _ := e2.OverrideDeadline(o.Name); !dl.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("after restart deadline %v, want t0+2s", dl)
	}
}

func TestRestoreSightingsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    string
	}{
		{"not JSON", "{", "unexpected end of JSON input"},
		{"at the size bound", "[]" + strings.Repeat(" ", MaxSightingsBytes-2), ""},
		{"past the size bound", "[]" + strings.Repeat(" ", MaxSightingsBytes-1), "larger than 1048576 bytes"},
		{"nameless", `[{"name":"","revision":1}]`, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, SightingsFile), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			err := restoreSightings(dir, authz.NewState(), time.Now())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
