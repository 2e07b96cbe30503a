package cgroupfs

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`/sys/fs/cgroup`, `/sys/fs/cgroup`},
		{`/sys/fs/cgroup\040x`, `/sys/fs/cgroup x`},
		{`/a\040b\\`, `/a b\\`}, // a trailing backslash without digits stays
		{`/a\400b`, `/a\400b`},  // past a byte: kept as written
		{`/a\08x`, `/a\08x`},    // not octal
		{`\134x`, `\x`},         // an escaped backslash
	} {
		if got := Unescape(tc.in); got != tc.want {
			t.Errorf("Unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMountIn(t *testing.T) {
	for _, tc := range []struct{ name, info, want, err string }{
		{"pure v2", "29 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup", ""},
		{"hybrid", "30 25 0:27 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n" +
			"31 25 0:28 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified", ""},
		{"escaped", "29 1 0:26 / /cg\\040root rw - cgroup2 cgroup2 rw\n", "/cg root", ""},
		{"none", "22 1 0:21 / /proc rw - proc proc rw\n", "", "no cgroup2 mount in /proc/self/mountinfo"},
	} {
		got, err := mountIn([]byte(tc.info))
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%s: mountIn = %q, %v; want %q, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestMountHere(t *testing.T) {
	// This machine's: whatever it is, found without error where cgroup2 is
	// mounted (every Linux this project runs on).
	if m, err := Mount(); err != nil || m == "" {
		t.Fatalf("Mount() = %q, %v", m, err)
	}
}
