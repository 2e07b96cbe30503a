//go:build linux

package redirect

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weft-mesh/weft/internal/cgroupfs"
)

// CgroupMount is the mount point of the cgroup v2 hierarchy (internal/cgroupfs).
func CgroupMount() (string, error) {
	m, err := cgroupfs.Mount()
	if err != nil {
		return "", fmt.Errorf("redirect: %w", err)
	}
	return m, nil
}

// OwnCgroup is this process's cgroup v2 directory: the sidecar's default
// --intercept-cgroup (in a pod of conformance/pods, the pod's cgroup). A
// process at the root of its cgroup namespace gets an error instead: that is
// the machine's root, or a container's own cgroup (Kubernetes with cgroup
// namespaces), which holds the sidecar's container and not the application's,
// whose traffic would then pass unseen.
func OwnCgroup() (string, error) {
	mount, err := CgroupMount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("redirect: own cgroup: %w", err)
	}
	return ownCgroup(mount, b)
}

// ownCgroup finds the "0::<path>" line of /proc/self/cgroup's content b.
func ownCgroup(mount string, b []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			if !strings.HasPrefix(p, "/") {
				return "", fmt.Errorf("redirect: own cgroup: unexpected path %q in /proc/self/cgroup", p)
			}
			if p == "/" {
				return "", errors.New("redirect: own cgroup is the root of this process's cgroup namespace (the machine's, or a container's own, which holds no application): give the pod's cgroup (--intercept-cgroup)")
			}
			return filepath.Join(mount, p), nil
		}
	}
	return "", errors.New("redirect: own cgroup: no cgroup v2 (0::) line in /proc/self/cgroup")
}
