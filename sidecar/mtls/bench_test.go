package mtls_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/mtls"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
)

// BenchmarkHandshake is the mesh's TLS configuration end to end in one process
// (both sides' CPU per handshake, over loopback TCP): TLS 1.3, P-256 SVIDs from one
// root, VerifyConnection with bundle, CRL and SAN checks on both sides. "full"
// never finds a session (a fresh cache key each time); "resumed" always does.
// handshakes/s = 1e9 / ns/op.
func BenchmarkHandshake(b *testing.B) {
	ca := mtlstest.NewCA(b, "bench root")
	clk := newClock()
	trust, err := mtls.NewTrust(ca.Bundle(b), ca.CRL(b, 1, time.Now().Add(-time.Minute), time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	srv := newSide(b, ca.Workload(b, td, "shop", "reviews"), clk, trust)
	cli := newSide(b, ca.Workload(b, td, "shop", "productpage"), clk, trust)
	up, err := mtls.NewUpstream("outbound|9080||reviews.shop", ids(reviews), []string{mtls.ALPNH2})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	once := func(b *testing.B, addr string, wantResumed bool) {
		cr, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		sr, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			sc, err := srv.m.Server(context.Background(), sr)
			if err == nil {
				_, err = sc.Write([]byte("x")) // the session ticket goes out before this
				sc.Close()
			}
			done <- err
		}()
		c, err := cli.m.Client(context.Background(), cr, addr, up)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		c.Close()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if c.Resumed() != wantResumed {
			b.Fatalf("resumed %v, want %v", c.Resumed(), wantResumed)
		}
	}
	run := 0 // -count reruns each sub-benchmark: fresh cache keys every run
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		run++
		for i := 0; b.Loop(); i++ {
			once(b, "full-"+strconv.Itoa(run)+"-"+strconv.Itoa(i), false)
		}
	})
	b.Run("resumed", func(b *testing.B) {
		b.ReportAllocs()
		run++
		key := "resumed-" + strconv.Itoa(run)
		once(b, key, false) // the ticket
		for b.Loop() {
			once(b, key, true)
		}
	})
}
