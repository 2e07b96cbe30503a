package pods

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/weft-mesh/weft/tools/testkit"
)

// CgroupRemoveTimeout bounds the wait for a killed cgroup's processes to be gone
// before it can be removed.
const CgroupRemoveTimeout = 10 * time.Second

// removeCgroup kills every process in the cgroup dir and below (cgroup.kill),
// waits for them to be gone and removes the directories, deepest first. A
// missing dir is no error.
func removeCgroup(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// cgroup.kill (Linux 5.14) SIGKILLs the whole subtree at once, so nothing
	// forks its way out.
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("killing cgroup %s: %w", dir, err)
	}
	err := testkit.Poll(CgroupRemoveTimeout, func() error {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("populated 1")) {
			return fmt.Errorf("cgroup %s still has processes", dir)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing cgroup: %w", err)
	}
	var dirs []string
	if err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		// A cgroup's directory holds only its interface files: rmdir, not RemoveAll.
		if err := testkit.Poll(CgroupRemoveTimeout, func() error { return os.Remove(dirs[i]) }); err != nil {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
