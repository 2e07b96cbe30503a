package pods

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
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
	if err := waitUnpopulated(dir, CgroupRemoveTimeout); err != nil {
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
		if err := os.Remove(dirs[i]); err != nil {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// waitUnpopulated waits, at most timeout, until no process is left in the
// cgroup dir or below: woken by the kernel's notification of cgroup.events
// (inotify IN_MODIFY), not by polling.
func waitUnpopulated(dir string, timeout time.Duration) error {
	events := filepath.Join(dir, "cgroup.events")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, events, unix.IN_MODIFY); err != nil {
		return fmt.Errorf("watching %s: %w", events, err)
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for {
		// Read after the watch exists, so no change between them is missed.
		b, err := os.ReadFile(events)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte("populated 1")) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s still has processes after %s", dir, timeout)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("waiting on %s: %w", events, err)
		}
		for {
			if _, err := unix.Read(fd, buf); err != nil {
				break // EAGAIN: drained
			}
		}
	}
}
