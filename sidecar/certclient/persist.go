package certclient

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/weft-mesh/weft/internal/atomicfile"
	"github.com/weft-mesh/weft/sidecar/svid"
)

// Persistence (Config.StateDir). A sidecar restarted while pilot is away
// would otherwise have no certificate, and so no mTLS, although the one it
// held is still valid and its routes come back from the last-known-good: a
// control plane outage plus a restart became a data plane outage. So each
// certificate stored is also written, with its key, to FileName in the state
// directory (mode 0600, atomically), and Run starts from it when it is still
// good: for this workload's SPIFFE ID, inside NotBefore..NotAfter, verified
// against the trust roots, the file not readable by others. Anything else is
// discarded (the file removed, the reason logged). The rules for the
// certificate are unchanged: it is never used past NotAfter (sidecar/mtls),
// the CRL still applies, and it is renewed as if held all along.
//
// This departs from Istio and Linkerd, which keep the key in memory only; the
// key is exposed as long as the certificate lives (NotAfter bounds it, the
// CRL can cut it) to whoever can read the state directory, which is the
// sidecar's own (in Kubernetes an emptyDir of the pod, mounted in no other
// container). kubelet keeps its client certificate and key on disk in the
// same way, for the same reason.

// FileName is the persisted certificate and key in Config.StateDir.
const FileName = "workload-svid.pem"

// FileMode is the persisted file's mode; a file any other user may read or
// write is discarded on load.
const FileMode fs.FileMode = 0o600

// RemovePersisted removes the certificate and key persisted in stateDir, if
// any: a sidecar told to keep its key in memory only must not leave an earlier
// run's on disk. It reports whether there was one.
func RemovePersisted(stateDir string) (bool, error) {
	err := os.Remove(filepath.Join(stateDir, FileName))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("removing the persisted workload certificate: %w", err)
}

// restore loads the persisted certificate into the holder when it is still
// good at now; it reports whether it did.
func (c *Client) restore(now time.Time) bool {
	path := filepath.Join(c.cfg.StateDir, FileName)
	s, err := c.loadPersisted(path, now)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("discarding the persisted workload certificate", "file", path, "error", err)
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				c.log.Warn("removing the persisted workload certificate", "file", path, "error", rerr)
			}
		}
		return false
	}
	// Renewed on its own schedule, as if it had been held since it was issued:
	// a restart neither postpones nor hurries the renewal.
	c.received = s.NotBefore
	c.lastLifetime = Usable(s, c.received)
	c.jitter = c.cfg.Rand()
	c.cfg.Holder.Store(s)
	c.log.Info("workload certificate restored from the state directory", "file", path, "serial", s.Cert.Leaf.SerialNumber.String(),
		"not_after", s.NotAfter.UTC().Format(time.RFC3339Nano), "left", s.NotAfter.Sub(now).Round(time.Second))
	return true
}

// loadPersisted reads and checks the persisted certificate at now.
func (c *Client) loadPersisted(path string, now time.Time) (*svid.SVID, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&^FileMode != 0 {
		return nil, fmt.Errorf("mode %v: other users may read or write it (want %v)", perm, FileMode)
	}
	b, err := io.ReadAll(io.LimitReader(f, svid.MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	s, err := svid.Parse(b)
	if err != nil {
		return nil, err
	}
	leaf := s.Cert.Leaf
	switch {
	case s.ID != c.id:
		return nil, fmt.Errorf("certificate serial %s is for %s, this workload is %s", leaf.SerialNumber, s.ID, c.id)
	case now.After(s.NotAfter):
		return nil, fmt.Errorf("certificate serial %s expired at %s", leaf.SerialNumber, s.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(s.NotBefore):
		return nil, fmt.Errorf("certificate serial %s is not valid before %s", leaf.SerialNumber, s.NotBefore.UTC().Format(time.RFC3339))
	}
	chain := []*x509.Certificate{leaf}
	for i, der := range s.Cert.Certificate[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("certificate serial %s: intermediate %d: %w", leaf.SerialNumber, i, err)
		}
		chain = append(chain, ic)
	}
	trust, err := c.cfg.Trust()
	if err != nil {
		return nil, fmt.Errorf("trust roots: %w", err)
	}
	if _, err := trust.Verify(chain, now); err != nil {
		return nil, fmt.Errorf("certificate serial %s does not verify against the trust roots: %w", leaf.SerialNumber, err)
	}
	return s, nil
}

// persist writes s (just stored) to the state directory; a failure is logged,
// the certificate is in use anyway.
func (c *Client) persist(s *svid.SVID) {
	if c.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(c.cfg.StateDir, FileName)
	b, err := svid.Marshal(s)
	if err == nil {
		err = atomicfile.Write(path, b, FileMode)
	}
	if err != nil {
		c.log.Warn("persisting the workload certificate", "file", path, "error", err)
	}
}
