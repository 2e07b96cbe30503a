package archtest

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MaxCommittedFileBytes bounds any one file in the repository: the largest
// source file (generated protos) is a few hundred KiB; a bigger one is almost
// always a build output committed by mistake (a 52 MB adsload binary was).
const MaxCommittedFileBytes = 1 << 20

// No build outputs are committed: no file over MaxCommittedFileBytes and no
// ELF executable or shared object (ebpf/bpf's objects are relocatable ELF,
// generated from source and checked byte for byte, and stay allowed).
func TestNoCommittedBuildOutputs(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the rule reads the checkout's files with git)", err)
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0})
	if len(files) < 100 {
		t.Fatalf("git ls-files lists only %d files; the rule would prove nothing", len(files))
	}
	for _, f := range files {
		path := filepath.Join(dir, string(f))
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		if fi.Size() > MaxCommittedFileBytes {
			t.Errorf("%s: %d bytes committed, limit %d (a build output? add it to .gitignore)", f, fi.Size(), MaxCommittedFileBytes)
		}
		if e, err := elf.Open(path); err == nil {
			if e.Type == elf.ET_EXEC || e.Type == elf.ET_DYN {
				t.Errorf("%s: an ELF %s is committed (a build output? add it to .gitignore)", f, e.Type)
			}
			e.Close()
		}
	}
}
