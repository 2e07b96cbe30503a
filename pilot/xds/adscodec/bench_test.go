package adscodec

import (
	"fmt"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// BenchmarkPush is one stream's Send of a push, as gRPC's codec runs it:
// "grpc" is grpc-go's protobuf codec (before), "shared" this one (after). The
// buffers are not freed, as they are not while a stream's flow control holds
// them; B/op is what each stream allocates for the push, and own-B/stream what
// of the encoded message is the stream's own (the rest references the
// snapshot's Any.Value, shared by every stream).
//
//   - eds-2000: the EDS push after one endpoint change of a Service with 2,000
//     registered sidecars (one ~250 KB ClusterLoadAssignment).
//   - cds-1000: a full sync of 1,000 small resources (all under InlineMax:
//     copied by both).
func BenchmarkPush(b *testing.B) {
	big := cla(2000)
	eds := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: snapshot.EndpointType, Nonce: "12345", SystemVersionInfo: "0123456789abcdef",
		Resources: []*discoveryv3.Resource{{Name: "outbound|80||big.bench.svc.cluster.local", Version: "0123456789abcdef", Resource: big}}}
	cds := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: snapshot.ClusterType, Nonce: "12345", SystemVersionInfo: "0123456789abcdef"}
	for i := range 1000 {
		name := fmt.Sprintf("outbound|80||svc-%04d.bench.svc.cluster.local", i)
		cds.Resources = append(cds.Resources, &discoveryv3.Resource{Name: name, Version: "0123456789abcdef",
			Resource: &anypb.Any{TypeUrl: snapshot.ClusterType, Value: value(300)}})
	}
	codecs := []struct {
		name string
		c    encoding.CodecV2
	}{{"grpc", encoding.GetCodecV2(grpcproto.Name)}, {"shared", Codec{}}}
	for _, m := range []struct {
		name   string
		resp   *discoveryv3.DeltaDiscoveryResponse
		shared []*anypb.Any
	}{{"eds-2000", eds, []*anypb.Any{big}}, {"cds-1000", cds, nil}} {
		for _, c := range codecs {
			b.Run(m.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				var own int
				for b.Loop() {
					bs, err := c.c.Marshal(m.resp)
					if err != nil {
						b.Fatal(err)
					}
					own = ownBytes(bs, m.shared)
				}
				b.ReportMetric(float64(own), "own-B/stream")
			})
		}
	}
}

// ownBytes is the encoded bytes of bs that are not one of shared's values.
func ownBytes(bs mem.BufferSlice, shared []*anypb.Any) int {
	n := 0
	for _, buf := range bs {
		d := buf.ReadOnlyData()
		isShared := false
		for _, a := range shared {
			if len(d) == len(a.Value) && len(d) > 0 && &d[0] == &a.Value[0] {
				isShared = true
			}
		}
		if !isShared {
			n += len(d)
		}
	}
	return n
}
