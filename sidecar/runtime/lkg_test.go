package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/sidecar/runtime/lkg"
	"github.com/weft-mesh/weft/sidecar/runtime/runtimetest"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
)

// persisted activates a signed config through Apply so the runtime writes its
// last-known-good file, and returns the file's path.
func persisted(t *testing.T, e *env, validity time.Duration) string {
	t.Helper()
	r := e.runtime()
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{revision: 5, validity: validity}))); err != nil {
		t.Fatal(err)
	}
	e.flush()
	return filepath.Join(e.dir, lkg.FileName)
}

func TestLastKnownGoodStart(t *testing.T) {
	e := newEnv(t)
	persisted(t, e, 0)
	// Restart 10 minutes later, pilot down.
	e.clock.Set(t0.Add(10 * time.Minute))
	r := e.runtime()
	u, err := r.LoadLastKnownGood()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(u.Resources[manifest.TypeURL]) + len(u.Resources); n < 5 {
		t.Fatalf("initial state has %d entries", n)
	}
	if got := r.LastKnownGoodConfirmed(); !got.Equal(t0) {
		t.Fatalf("LastKnownGoodConfirmed = %s, want %s", got, t0)
	}
	if ok, why := r.Ready(); ok || why != "last-known-good verified, not yet active: waiting briefly for pilot" {
		t.Fatalf("Ready before activation = %v %q", ok, why)
	}
	if !r.ActivateLastKnownGood() {
		t.Fatal("not activated")
	}
	if r.ActivateLastKnownGood() {
		t.Fatal("activated twice")
	}
	d := r.Dump()
	if !d.Ready || d.Active.Source != SourceLKG || d.Active.Revision != 5 || !d.LastConfirmed.Equal(t0) {
		t.Fatalf("dump = ready %v active %+v lastConfirmed %s", d.Ready, d.Active, d.LastConfirmed)
	}
	// Age counts from the file's lastConfirmed, not from the restart.
	st := r.Tick(t0.Add(10*time.Minute), time.Time{})
	for _, s := range st {
		if s.Class == staleness.Routes && s.Age != 10*time.Minute {
			t.Fatalf("routes age = %v, want 10m", s.Age)
		}
	}
	// The same content from pilot afterwards is a no-op.
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{revision: 5}))); err != nil {
		t.Fatal(err)
	}
	if r.Dump().Counters.Activations != 1 {
		t.Fatalf("activations = %d, want 1", r.Dump().Counters.Activations)
	}
}

func TestLastKnownGoodStreamWins(t *testing.T) {
	e := newEnv(t)
	persisted(t, e, 0)
	r := e.runtime()
	if _, err := r.LoadLastKnownGood(); err != nil {
		t.Fatal(err)
	}
	res := mesh("127.0.0.1:9002")
	if err := r.Apply(context.Background(), e.update(r, res, "v2", e.sign(res, signOpts{revision: 6}))); err != nil {
		t.Fatal(err)
	}
	if r.ActivateLastKnownGood() {
		t.Fatal("last-known-good replaced what pilot delivered")
	}
	if got := r.Dump().Active.Revision; got != 6 {
		t.Fatalf("revision = %d", got)
	}
}

func TestLastKnownGoodRefusals(t *testing.T) {
	tests := []struct {
		name  string
		alter func(t *testing.T, e *env, path string) *Runtime
		check string
		is    error
	}{
		{"one byte altered", func(t *testing.T, e *env, path string) *Runtime {
			if err := runtimetest.AlterOneByte(path); err != nil {
				t.Fatal(err)
			}
			return e.runtime()
		}, "digest", manifest.ErrMismatch},
		{"other node", func(t *testing.T, e *env, path string) *Runtime {
			return e.runtime(func(c *Config) { c.NodeID = "ratings-v1-a" })
		}, "node", manifest.ErrNode},
		{"past validity", func(t *testing.T, e *env, path string) *Runtime {
			e.clock.Set(t0.Add(2 * time.Hour))
			return e.runtime()
		}, "validity", manifest.ErrExpired},
		{"routing expired", func(t *testing.T, e *env, path string) *Runtime {
			e.clock.Set(t0.Add(10 * time.Second))
			return e.runtime(func(c *Config) { c.Overrides = overrides(t, "routes=1s/5s/failClosed") })
		}, "staleness", errStale},
		{"other publisher", func(t *testing.T, e *env, path string) *Runtime {
			return e.runtime(func(c *Config) { c.PublisherKey = make([]byte, 32) })
		}, "publisher key", manifest.ErrKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			path := persisted(t, e, time.Hour)
			r := tc.alter(t, e, path)
			before := len(e.logs.lines("last-known-good refused"))
			_, err := r.LoadLastKnownGood()
			if !errors.Is(err, tc.is) || Check(err) != tc.check {
				t.Fatalf("LoadLastKnownGood = %v, want %v (check %s)", err, tc.is, tc.check)
			}
			lines := e.logs.lines("last-known-good refused")
			token := "check=" + tc.check + " "
			if strings.Contains(tc.check, " ") {
				token = "check=\"" + tc.check + "\""
			}
			if len(lines)-before != 1 || !strings.Contains(lines[len(lines)-1], token) {
				t.Fatalf("want one log line naming check %q, got %q", tc.check, lines[before:])
			}
			if r.ActivateLastKnownGood() || r.Load() != nil {
				t.Fatal("refused snapshot activated")
			}
			ok, why := r.Ready()
			if ok || !strings.HasPrefix(why, "last-known-good refused ("+tc.check+" check failed): ") {
				t.Fatalf("Ready = %v %q", ok, why)
			}
		})
	}
}

func TestLastKnownGoodNone(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	if _, err := r.LoadLastKnownGood(); !errors.Is(err, lkg.ErrNoSnapshot) {
		t.Fatalf("err = %v", err)
	}
	if ok, why := r.Ready(); ok || why != "no configuration yet: waiting for pilot" {
		t.Fatalf("Ready = %v %q", ok, why)
	}
	if len(e.logs.lines("last-known-good refused")) != 0 {
		t.Fatal("first start logged a refusal")
	}
}

func TestLastKnownGoodExpiresWhileWaiting(t *testing.T) {
	e := newEnv(t)
	persisted(t, e, 0)
	r := e.runtime(func(c *Config) { c.Overrides = overrides(t, "routes=1s/5s") })
	if _, err := r.LoadLastKnownGood(); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t0.Add(6 * time.Second))
	if r.ActivateLastKnownGood() {
		t.Fatal("activated an expired snapshot")
	}
	if ok, why := r.Ready(); ok || !strings.Contains(why, "staleness check failed") {
		t.Fatalf("Ready = %v %q", ok, why)
	}
}

func TestLastConfirmedPersisted(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) { c.PersistEvery = time.Minute })
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		now, confirmed time.Time
		want           time.Time // lastConfirmed in the file
	}{
		{t0.Add(30 * time.Second), t0.Add(30 * time.Second), t0},                       // under PersistEvery: not written
		{t0.Add(90 * time.Second), t0.Add(90 * time.Second), t0.Add(90 * time.Second)}, // written
		{t0.Add(10 * time.Minute), time.Time{}, t0.Add(90 * time.Second)},              // no confirmation: unchanged
	}
	for i, tc := range tests {
		e.clock.Set(tc.now)
		r.Tick(tc.now, tc.confirmed)
		e.flush()
		s, _, err := lkg.Load(e.dir, manifest.Trust{Pin: e.pub}, nodeID, tc.now)
		if err != nil {
			t.Fatal(err)
		}
		if !s.LastConfirmed.Equal(tc.want) {
			t.Errorf("step %d: file lastConfirmed %s, want %s", i, s.LastConfirmed, tc.want)
		}
	}
}
