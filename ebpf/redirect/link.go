//go:build linux

package redirect

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The two bpf(2) commands this package makes itself rather than through
// cilium/ebpf/link: that package brings cilium/ebpf/features, whose
// initialisation every sidecar would run (and keep resident) in every mode.
const (
	bpfObjGetInfoByFD = 15
	bpfLinkCreate     = 28
)

// cgroupLink is a bpf_link of a program to a cgroup (BPF_LINK_CREATE, never
// the legacy attach that outlives its process): closing its fd, or the
// process's death, detaches it.
type cgroupLink struct {
	fd int
	id uint32
}

// linkCgroup attaches the program prog (fd) to the cgroup dirfd at hook typ.
func linkCgroup(dirfd, prog int, typ uint32) (*cgroupLink, error) {
	attr := struct{ progFD, targetFD, attachType, flags uint32 }{uint32(prog), uint32(dirfd), typ, 0}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return nil, fmt.Errorf("create link: %w", errno)
	}
	l := &cgroupLink{fd: int(fd)}
	unix.CloseOnExec(l.fd)
	var info struct{ typ, id, progID uint32 }
	infoAttr := struct {
		fd, infoLen uint32
		info        uint64
	}{uint32(l.fd), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info)))}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&infoAttr)), unsafe.Sizeof(infoAttr)); errno != 0 {
		unix.Close(l.fd)
		return nil, fmt.Errorf("link info: %w", errno)
	}
	l.id = info.id
	return l, nil
}

// Close detaches.
func (l *cgroupLink) Close() error { return unix.Close(l.fd) }
