package intercept

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// nsPrefix names every network namespace these tests create: "wint<pid>x<n>", so a
// later run can sweep those of a killed one.
const nsPrefix = "wint"

// sweepStale deletes namespaces of ours whose creating process is gone.
func sweepStale() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "x")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidText); err == nil {
			continue // still running (maybe a parallel run)
		}
		_ = exec.Command("ip", "netns", "del", e.Name()).Run()
	}
}
