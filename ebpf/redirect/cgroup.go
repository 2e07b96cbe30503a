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
)

// CgroupMount is the mount point of the cgroup v2 hierarchy, from
// /proc/self/mountinfo (/sys/fs/cgroup on a pure v2 machine, its unified
// directory on a hybrid one).
func CgroupMount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("redirect: finding the cgroup2 mount: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		f := strings.Fields(sc.Text())
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				return unescapeMount(f[4]), nil
			}
		}
	}
	return "", errors.New("redirect: no cgroup2 mount in /proc/self/mountinfo")
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

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := parseOctal(s[i+1 : i+4]); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func parseOctal(s string) (byte, error) {
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, errors.New("not octal")
		}
		v = v*8 + int(c-'0')
	}
	if v > 255 {
		return 0, errors.New("octal escape past a byte")
	}
	return byte(v), nil
}
