package app

// Override sightings across restarts: a restarted sidecar must not give an
// Override a fresh TTL. The authz.State's sightings are written to
// <state-dir>/authz-sightings.json after every change (off the request path and
// outside every lock) and restored before the first compile, last-known-good
// included. Independently, pilot bounds every Override by expiresAt when it
// knows the store time; with both, a sidecar that restarts within the TTL
// enforces only what is left of it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/internal/atomicfile"
	"github.com/weft-mesh/weft/sidecar/authz"
)

// SightingsFile is the file in the state directory holding Override sightings.
const SightingsFile = "authz-sightings.json"

// MaxSightingsBytes bounds the sightings file read at start.
const MaxSightingsBytes = 1 << 20

// restoreSightings seeds st from dir's sightings file; a missing file is a
// first start. A file that does not parse is an error: starting without it
// could extend an Override.
func restoreSightings(dir string, st *authz.State, now time.Time) error {
	path := filepath.Join(dir, SightingsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("override sightings: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSightingsBytes+1))
	if err != nil {
		return fmt.Errorf("override sightings %s: %w", path, err)
	}
	if len(b) > MaxSightingsBytes {
		return fmt.Errorf("override sightings %s: larger than %d bytes", path, MaxSightingsBytes)
	}
	var gs []authz.Sighting
	if err := json.Unmarshal(b, &gs); err != nil {
		return fmt.Errorf("override sightings %s: %w", path, err)
	}
	if err := st.Restore(gs, now); err != nil {
		return fmt.Errorf("override sightings %s: %w", path, err)
	}
	return nil
}

// persistSightings writes st's sightings to dir at start and whenever they
// change, until ctx ends. The channel is taken before each write, so a change
// during a write is written again.
func persistSightings(ctx context.Context, dir string, st *authz.State, log hclog.Logger) {
	path := filepath.Join(dir, SightingsFile)
	logged := map[string]bool{} // name@revision already logged as enforced
	for {
		ch := st.Changed()
		gs := st.Sightings()
		now := map[string]bool{}
		for _, g := range gs {
			if !g.Live {
				continue
			}
			k := fmt.Sprintf("%s@%d", g.Name, g.Revision)
			now[k] = true
			if !logged[k] {
				log.Info("override enforced", "override", g.Name, "revision", g.Revision, "first_seen", g.FirstSeen, "until", g.Deadline)
			}
		}
		logged = now
		b, err := json.Marshal(gs)
		if err == nil {
			err = atomicfile.Write(path, b, 0o600)
		}
		if err != nil {
			log.Error("persisting override sightings failed: a restart may give an Override a new TTL (pilot's expiresAt still bounds it)", "path", path, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
