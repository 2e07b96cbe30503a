// Package cgroupfs finds the cgroup v2 hierarchy's mount point, for the eBPF
// redirect (the sidecar's own cgroup) and the test pods (conformance/pods),
// which must agree on it.
package cgroupfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Mount is the mount point of the cgroup v2 (unified) hierarchy, from
// /proc/self/mountinfo (/sys/fs/cgroup on a pure v2 machine, its unified
// directory on a hybrid one).
func Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("finding the cgroup2 mount: %w", err)
	}
	return mountIn(b)
}

// mountIn finds the cgroup2 mount point in mountinfo's content b.
func mountIn(b []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		f := strings.Fields(sc.Text())
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				return Unescape(f[4]), nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading /proc/self/mountinfo: %w", err)
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
}

// Unescape undoes mountinfo's octal escapes (\040 for a space); a backslash
// not followed by three octal digits of a byte stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, ok := octalByte(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octalByte(s string) (byte, bool) {
	v := 0
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}
