//go:build linux

package redirect

import (
	"net"
	"net/netip"
	"testing"
)

// BenchmarkConnect: TCP connect, accept and close in a pod with the programs
// attached: "redirected" dials a non-loopback address (connect4 rewrites it,
// sockops re-keys, getsockopt answers SO_ORIGINAL_DST), "direct" dials the
// same listener on loopback (the programs run and leave it alone; its
// SO_ORIGINAL_DST is ENOENT). The difference is the redirect's cost per
// connection. Root:
// go test -run '^$' -bench Connect -benchtime 20000x ./ebpf/redirect/
func BenchmarkConnect(b *testing.B) {
	for _, redirected := range []bool{false, true} {
		name := "direct"
		if redirected {
			name = "redirected"
		}
		b.Run(name, func(b *testing.B) {
			node, pod, _ := setup(b, Config{})
			proxy := listen(b, pod, "tcp4", "127.0.0.1:15001")
			target := "127.0.0.1:15001"
			if redirected {
				target = netip.AddrPortFrom(node.Gateway, 8080).String()
			}
			b.ResetTimer()
			// One netns thread for the whole loop (each Do costs a thread).
			if err := pod.Do(func() error {
				for i := 0; i < b.N; i++ {
					c, err := net.Dial("tcp4", target)
					if err != nil {
						return err
					}
					s, err := proxy.Accept()
					if err != nil {
						return err
					}
					// Both ask (direct gets ENOENT), so only the redirect differs.
					if _, err := OriginalDst(s.(*net.TCPConn)); redirected && err != nil {
						return err
					}
					s.Close()
					c.Close()
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		})
	}
}
