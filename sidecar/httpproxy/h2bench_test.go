package httpproxy_test

import "testing"

// BenchmarkPeerPair measures one keep-alive HTTP/1.1 request through the
// sidecar pair of issue #9 (client → outbound sidecar → pooled h2c peer hop →
// inbound sidecar → app, 1 KiB response), both sidecars in this process:
// allocs/op and B/op are the pair's together (the HTTP/2 client and server
// included). Run: go test -bench PeerPair -benchmem ./sidecar/httpproxy.
func BenchmarkPeerPair(b *testing.B) {
	m := startPeerMesh(b, rawApp(b), peerOpts{})
	benchClients(b, m.out.Addr.String(), nil)
}
