package adscodec

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// unknown is a field number no ADS message uses, appended as an unknown field.
func unknown() []byte {
	b := protowire.AppendTag(nil, 999, protowire.BytesType)
	return protowire.AppendString(b, "future field")
}

func value(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// fullResource sets every field of Resource (TestEveryFieldSet checks it).
func fullResource(name string, valueLen int) *discoveryv3.Resource {
	r := &discoveryv3.Resource{Name: name, Version: "v-" + name, Aliases: []string{name + "-alias"},
		ResourceName: &discoveryv3.ResourceName{Name: name}, Ttl: durationpb.New(time.Minute),
		CacheControl: &discoveryv3.Resource_CacheControl{DoNotCache: true},
		Metadata:     &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft": {}}},
		Resource:     &anypb.Any{TypeUrl: snapshot.EndpointType, Value: value(valueLen)}}
	r.ProtoReflect().SetUnknown(unknown())
	return r
}

func fullDelta() *discoveryv3.DeltaDiscoveryResponse {
	m := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "sv", TypeUrl: snapshot.EndpointType, Nonce: "17",
		RemovedResources: []string{"gone"}, RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "gone"}},
		ControlPlane:   &corev3.ControlPlane{Identifier: "pilot"},
		ResourceErrors: []*discoveryv3.ResourceError{{ResourceName: &discoveryv3.ResourceName{Name: "bad"}}},
		Resources:      []*discoveryv3.Resource{fullResource("big", 100_000), fullResource("small", 10)}}
	m.ProtoReflect().SetUnknown(unknown())
	return m
}

func fullSotW() *discoveryv3.DiscoveryResponse {
	m := &discoveryv3.DiscoveryResponse{VersionInfo: "v", TypeUrl: snapshot.ClusterType, Nonce: "3", Canary: true,
		ControlPlane:   &corev3.ControlPlane{Identifier: "pilot"},
		ResourceErrors: []*discoveryv3.ResourceError{{ResourceName: &discoveryv3.ResourceName{Name: "bad"}}},
		Resources:      []*anypb.Any{{TypeUrl: snapshot.ClusterType, Value: value(InlineMax + 1)}, {TypeUrl: snapshot.ClusterType, Value: value(3)}}}
	m.ProtoReflect().SetUnknown(unknown())
	return m
}

// TestEveryFieldSet keeps the round-trip fixtures complete: a field added to
// the messages in a go-control-plane update must be set there too, or the
// round trip would not show that the codec keeps it.
func TestEveryFieldSet(t *testing.T) {
	for _, m := range []proto.Message{fullDelta(), fullDelta().Resources[0], fullSotW()} {
		r := m.ProtoReflect()
		fds := r.Descriptor().Fields()
		for i := range fds.Len() {
			if fd := fds.Get(i); !r.Has(fd) {
				t.Errorf("%s: field %s not set in the fixture", r.Descriptor().FullName(), fd.Name())
			}
		}
	}
}

// TestPlainKnowsEveryField: the allocation-free path for a Resource knows every
// field Resource has, so a field added upstream cannot be dropped by it.
// Likewise deltaHead's copy of a DeltaDiscoveryResponse (all but resources).
func TestPlainKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		m     proto.Message
		known []protoreflect.Name
		fix   string
	}{
		{&discoveryv3.Resource{}, resourceFields, "resourceFields and plain's check"},
		{&discoveryv3.DeltaDiscoveryResponse{}, append([]protoreflect.Name{"resources"}, deltaHeadFields...), "deltaHeadFields and deltaHead's copy"},
	} {
		fds := tc.m.ProtoReflect().Descriptor().Fields()
		name := tc.m.ProtoReflect().Descriptor().Name()
		known := map[protoreflect.Name]bool{}
		for _, n := range tc.known {
			known[n] = true
		}
		if fds.Len() != len(known) {
			t.Errorf("%s has %d fields, the fast path knows %d", name, fds.Len(), len(known))
		}
		for i := range fds.Len() {
			if !known[fds.Get(i).Name()] {
				t.Errorf("%s field %s unknown to the fast path: add it to %s", name, fds.Get(i).Name(), tc.fix)
			}
		}
	}
}

func encode(t testing.TB, m proto.Message) (mem.BufferSlice, []byte) {
	t.Helper()
	bs, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return bs, bs.Materialize()
}

func roundTrip(t *testing.T, m proto.Message) mem.BufferSlice {
	t.Helper()
	bs, b := encode(t, m)
	if len(b) != proto.Size(m) {
		t.Errorf("encoded %d bytes, proto.Size says %d", len(b), proto.Size(m))
	}
	got := m.ProtoReflect().Type().New().Interface()
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatalf("Unmarshal of the codec's output: %v", err)
	}
	if !proto.Equal(m, got) {
		t.Errorf("round trip differs (-in +out):\n%s", cmp.Diff(m, got, protocmp.Transform()))
	}
	// And decoded by the codec itself (the server's requests).
	again := m.ProtoReflect().Type().New().Interface()
	if err := (Codec{}).Unmarshal(bs, again); err != nil || !proto.Equal(got, again) {
		t.Errorf("Codec.Unmarshal: %v, equal %v", err, proto.Equal(got, again))
	}
	return bs
}

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		m    proto.Message
	}{
		{"delta every field", fullDelta()},
		{"delta empty", &discoveryv3.DeltaDiscoveryResponse{}},
		{"delta nil resource and nil Any", &discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{nil, {Name: "no-any"}}}},
		{"delta plain resources", &discoveryv3.DeltaDiscoveryResponse{Nonce: "2", Resources: []*discoveryv3.Resource{
			{Name: "a", Version: "1", Resource: &anypb.Any{TypeUrl: snapshot.ClusterType, Value: value(600)}},
			{Name: "b", Resource: &anypb.Any{TypeUrl: snapshot.ClusterType, Value: value(6)}}, {Version: "only"}}}},
		{"delta Any with an empty value", &discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{{Name: "e", Resource: &anypb.Any{TypeUrl: snapshot.ListenerType}}}}},
		{"delta Any with unknown fields", func() proto.Message {
			a := &anypb.Any{TypeUrl: snapshot.ListenerType, Value: value(4000)}
			a.ProtoReflect().SetUnknown(unknown())
			return &discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{{Name: "u", Resource: a}}}
		}()},
		{"sotw every field", fullSotW()},
		{"sotw empty", &discoveryv3.DiscoveryResponse{}},
		{"sotw nil Any", &discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{nil, {TypeUrl: "x"}}}},
		{"another message (grpc-go's codec)", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: snapshot.ClusterType, ResponseNonce: "1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { roundTrip(t, c.m) })
	}
}

// refs reports which buffers of bs alias v's backing array.
func aliases(bs mem.BufferSlice, v []byte) int {
	n := 0
	for _, b := range bs {
		d := b.ReadOnlyData()
		if len(d) == len(v) && len(d) > 0 && &d[0] == &v[0] {
			n++
		}
	}
	return n
}

// TestSharesValues: a value above InlineMax is referenced, not copied; one at
// InlineMax is copied (the bound and one past it).
func TestSharesValues(t *testing.T) {
	for _, c := range []struct {
		n      int
		shared bool
	}{{InlineMax, false}, {InlineMax + 1, true}, {64 << 10, true}, {0, false}} {
		v := value(c.n)
		delta := &discoveryv3.DeltaDiscoveryResponse{Nonce: "1", Resources: []*discoveryv3.Resource{{Name: "r", Version: "1", Resource: &anypb.Any{TypeUrl: snapshot.EndpointType, Value: v}}}}
		sotw := &discoveryv3.DiscoveryResponse{Nonce: "1", Resources: []*anypb.Any{{TypeUrl: snapshot.EndpointType, Value: v}}}
		for _, m := range []proto.Message{delta, sotw} {
			bs := roundTrip(t, m)
			want := 0
			if c.shared {
				want = 1
			}
			if got := aliases(bs, v); got != want {
				t.Errorf("%T with a %d-byte value: %d buffers alias it, want %d", m, c.n, got, want)
			}
		}
	}
}

// cla is a ClusterLoadAssignment of n endpoints shaped as gen renders a
// registered sidecar's (address, port, weight, weft metadata).
func cla(n int) *anypb.Any {
	c := &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|80||big.bench.svc.cluster.local"}
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{}}
	for i := range n {
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 15006}}}}}},
			Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft": {Fields: map[string]*structpb.Value{
				"namespace": structpb.NewStringValue("bench"), "serviceAccount": structpb.NewStringValue("default"),
				"peer": structpb.NewStringValue("sidecar"), "mtls": structpb.NewStringValue("true")}}}},
		})
	}
	c.Endpoints = []*endpointv3.LocalityLbEndpoints{loc}
	r, err := snapshot.NewResource(snapshot.EndpointType, c.ClusterName, c)
	if err != nil {
		panic(err)
	}
	return r.Any
}

// ads is a minimal delta ADS server sending resp once per stream.
type ads struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	resp *discoveryv3.DeltaDiscoveryResponse
}

func (a *ads) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if err := s.Send(a.resp); err != nil {
		return err
	}
	_, err := s.Recv() // the client's ACK, then EOF
	return err
}

// TestOverGRPC: a stock grpc-go client decodes what a server with the codec
// sends, equal to what was sent, on many streams at once.
func TestOverGRPC(t *testing.T) {
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: snapshot.EndpointType, Nonce: "1", SystemVersionInfo: "v",
		Resources: []*discoveryv3.Resource{{Name: "big", Version: "1", Resource: cla(2000)}, {Name: "small", Version: "2", Resource: cla(1)}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOption())
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, &ads{resp: resp})
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const streams = 20
	errs := make(chan error, streams)
	for range streams {
		go func() {
			s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
			if err != nil {
				errs <- err
				return
			}
			if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: snapshot.EndpointType}); err != nil {
				errs <- err
				return
			}
			got, err := s.Recv()
			if err != nil {
				errs <- err
				return
			}
			if !proto.Equal(got, resp) {
				errs <- fmt.Errorf("received a response different from the one sent")
				return
			}
			errs <- s.CloseSend()
		}()
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzRoundTrip: whatever parses as an ADS response encodes to bytes that parse
// back to an equal message.
func FuzzRoundTrip(f *testing.F) {
	for _, m := range []proto.Message{fullDelta(), fullSotW()} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&discoveryv3.DeltaDiscoveryResponse{}, &discoveryv3.DiscoveryResponse{}} {
			if proto.Unmarshal(b, m) != nil {
				continue
			}
			_, out := encode(t, m)
			back := m.ProtoReflect().Type().New().Interface()
			if err := proto.Unmarshal(out, back); err != nil {
				t.Fatalf("codec output does not parse: %v", err)
			}
			if !proto.Equal(m, back) {
				t.Fatalf("round trip differs")
			}
			// The wire bytes of the big pieces are the input's, in order.
			if want, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(m); len(want) != len(out) {
				t.Fatalf("codec output %d bytes, protobuf's %d", len(out), len(want))
			}
		}
	})
}

// TestSimpleHead: the head written without protobuf is protobuf's encoding,
// byte for byte, for what pilot sets; anything else (or a string protobuf
// refuses) goes through protobuf.
func TestSimpleHead(t *testing.T) {
	for _, m := range []*discoveryv3.DeltaDiscoveryResponse{
		{},
		{Nonce: "1"},
		{SystemVersionInfo: "v", TypeUrl: snapshot.LbEndpointType, Nonce: "18446744073709551615", RemovedResources: []string{"a", "", "ü"}},
		{TypeUrl: snapshot.ManifestType, RemovedResources: []string{strings.Repeat("n", 300)}},
	} {
		if !simpleHead(m) {
			t.Fatalf("%v: not simple", m)
		}
		want, err := opts.Marshal(deltaHead(m))
		if err != nil {
			t.Fatal(err)
		}
		got := appendSimpleHead(nil, m)
		if !bytes.Equal(got, want) || simpleHeadSize(m) != len(want) {
			t.Errorf("%v: head %x (size %d), protobuf's %x", m, got, simpleHeadSize(m), want)
		}
	}
	for name, m := range map[string]*discoveryv3.DeltaDiscoveryResponse{
		"control plane":   {ControlPlane: &corev3.ControlPlane{Identifier: "p"}},
		"removed names":   {RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "x"}}},
		"resource errors": {ResourceErrors: []*discoveryv3.ResourceError{{}}},
		"unknown field": func() *discoveryv3.DeltaDiscoveryResponse {
			m := &discoveryv3.DeltaDiscoveryResponse{}
			m.ProtoReflect().SetUnknown(unknown())
			return m
		}(),
		"bad UTF-8 nonce":   {Nonce: "\xff"},
		"bad UTF-8 removed": {RemovedResources: []string{"ok", "\xc3"}},
	} {
		if simpleHead(m) {
			t.Errorf("%s: taken as simple", name)
		}
	}
	// protobuf refuses a string that is not UTF-8, and so does the codec.
	if _, err := (Codec{}).Marshal(&discoveryv3.DeltaDiscoveryResponse{RemovedResources: []string{"\xc3"}}); err == nil {
		t.Error("a removed name that is not UTF-8 was encoded")
	}
}

// TestDeltaSize: DeltaSize is proto.Size, on the fast path and off it.
func TestDeltaSize(t *testing.T) {
	withUnknownAny := &anypb.Any{TypeUrl: snapshot.ListenerType, Value: value(40)}
	withUnknownAny.ProtoReflect().SetUnknown(unknown())
	for name, m := range map[string]*discoveryv3.DeltaDiscoveryResponse{
		"empty":  {},
		"plain":  {Nonce: "12", SystemVersionInfo: "v", TypeUrl: snapshot.LbEndpointType, RemovedResources: []string{"x", ""}, Resources: []*discoveryv3.Resource{{Name: "a", Version: "1", Resource: &anypb.Any{TypeUrl: snapshot.LbEndpointType, Value: value(300)}}, {Name: "b", Resource: &anypb.Any{}}, {Version: "no any"}}},
		"big":    {Resources: []*discoveryv3.Resource{{Name: "a", Resource: &anypb.Any{TypeUrl: snapshot.EndpointType, Value: value(200_000)}}}},
		"every":  fullDelta(),
		"nil":    {Resources: []*discoveryv3.Resource{nil}},
		"unkAny": {Resources: []*discoveryv3.Resource{{Name: "u", Resource: withUnknownAny}}},
	} {
		if got, want := DeltaSize(m), proto.Size(m); got != want {
			t.Errorf("%s: DeltaSize %d, proto.Size %d", name, got, want)
		}
	}
}
