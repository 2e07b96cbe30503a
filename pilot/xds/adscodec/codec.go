// Package adscodec is pilot's gRPC codec: protobuf, except that an ADS response
// (DeltaDiscoveryResponse, DiscoveryResponse) is encoded without copying its
// resources' marshalled bytes. Each resource's Any.Value is the immutable
// output of snapshot.NewResource, shared by every snapshot and stream that
// sends that resource version; the codec writes only the few bytes that
// differ per stream (nonce, versions, the wrappers' tags and lengths) into a
// small buffer of the stream's own and hands gRPC's transport a BufferSlice
// that references the shared Any.Value slices in place. So a ~2,000-endpoint
// ClusterLoadAssignment pushed to 10,000 streams is held once, not 10,000
// times (the default codec marshals a full copy per Send into gRPC's buffer
// pool, which holds it until the stream's flow control lets it out).
//
// Contract of the sender: the bytes of every Any.Value it sends must not
// change after Send (pilot's snapshots are immutable: DESIGN.md convention
// 1). Every other field is encoded by protobuf itself, so the output parses to
// a message equal to the input (tested over every field by reflection).
package adscodec

import (
	"fmt"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// InlineMax is the largest Any.Value copied into the stream's own buffer
// instead of referenced: below it a reference (a 24-byte boxed slice header and
// a BufferSlice entry) costs about as much as the copy, and a full sync of a
// thousand small clusters would otherwise be thousands of tiny writes.
const InlineMax = 512

// Codec is an encoding.CodecV2. The zero value is ready to use.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// ServerOption makes a gRPC server use Codec for every message.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// fallback is grpc-go's own protobuf codec (registered by its package's init).
var fallback = encoding.GetCodecV2(grpcproto.Name)

// Name is "proto": the wire format is protobuf, so clients see no difference.
func (Codec) Name() string { return grpcproto.Name }

// Unmarshal is grpc-go's.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return fallback.Unmarshal(data, v) }

// Marshal encodes ADS responses sharing their resources' bytes, and anything
// else as grpc-go's codec does.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *discoveryv3.DeltaDiscoveryResponse:
		return marshalDelta(m)
	case *discoveryv3.DiscoveryResponse:
		return marshalSotW(m)
	}
	return fallback.Marshal(v)
}

var (
	deltaResources = (&discoveryv3.DeltaDiscoveryResponse{}).ProtoReflect().Descriptor().Fields().ByName("resources")
	sotwResources  = (&discoveryv3.DiscoveryResponse{}).ProtoReflect().Descriptor().Fields().ByName("resources")
	resourceAny    = (&discoveryv3.Resource{}).ProtoReflect().Descriptor().Fields().ByName("resource")
)

// without returns a shallow copy of m lacking field skip: protobuf encodes
// every other field (known, future and unknown ones) without this package
// listing them. Values are shared with m, not copied.
func without(m protoreflect.Message, skip protoreflect.FieldDescriptor) proto.Message {
	out := m.Type().New()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != skip {
			out.Set(fd, v)
		}
		return true
	})
	if u := m.GetUnknown(); len(u) > 0 {
		out.SetUnknown(u)
	}
	return out.Interface()
}

// deltaHead is m without its resources. A message without unknown fields is
// copied field by field (deltaHeadFields lists them; a test fails when the
// type gains one), which costs a fraction of without's reflection: pilot
// encodes one head per response, two responses per sidecar per change.
func deltaHead(m *discoveryv3.DeltaDiscoveryResponse) proto.Message {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return without(m.ProtoReflect(), deltaResources)
	}
	return &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo:    m.SystemVersionInfo,
		TypeUrl:              m.TypeUrl,
		RemovedResources:     m.RemovedResources,
		RemovedResourceNames: m.RemovedResourceNames,
		Nonce:                m.Nonce,
		ControlPlane:         m.ControlPlane,
		ResourceErrors:       m.ResourceErrors,
	}
}

// simpleHead reports whether m's fields other than resources are only those
// pilot sets (system_version_info, type_url, nonce, removed_resources), all
// valid UTF-8 as protobuf requires of strings: appendSimpleHead then writes
// them as protobuf does, without a message copy or reflection.
func simpleHead(m *discoveryv3.DeltaDiscoveryResponse) bool {
	if m.ControlPlane != nil || len(m.RemovedResourceNames) > 0 || len(m.ResourceErrors) > 0 || len(m.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	if !utf8.ValidString(m.SystemVersionInfo) || !utf8.ValidString(m.TypeUrl) || !utf8.ValidString(m.Nonce) {
		return false
	}
	for _, r := range m.RemovedResources {
		if !utf8.ValidString(r) {
			return false
		}
	}
	return true
}

// simpleHeadSize is the encoded size of a simple head.
func simpleHeadSize(m *discoveryv3.DeltaDiscoveryResponse) int {
	n := 0
	for _, f := range [...]string{m.SystemVersionInfo, m.TypeUrl, m.Nonce} {
		if f != "" {
			n += protowire.SizeTag(1) + protowire.SizeBytes(len(f))
		}
	}
	for _, r := range m.RemovedResources {
		n += protowire.SizeTag(6) + protowire.SizeBytes(len(r))
	}
	return n
}

// appendSimpleHead writes a simple head in field number order, as protobuf's
// deterministic encoding does (proto3: empty strings are not written; the
// elements of a repeated string are, empty or not).
func appendSimpleHead(b []byte, m *discoveryv3.DeltaDiscoveryResponse) []byte {
	for _, f := range [...]struct {
		num protowire.Number
		v   string
	}{{1, m.SystemVersionInfo}, {4, m.TypeUrl}, {5, m.Nonce}} {
		if f.v != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.v)
		}
	}
	for _, r := range m.RemovedResources {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, r)
	}
	return b
}

// deltaHeadFields are the DeltaDiscoveryResponse fields deltaHead copies.
var deltaHeadFields = []protoreflect.Name{"system_version_info", "type_url", "removed_resources", "removed_resource_names", "nonce", "control_plane", "resource_errors"}

// builder accumulates one message: bytes of its own in buf, shared values
// referenced between them. Segments of buf are cut when a shared value is
// referenced, so out interleaves them in wire order.
type builder struct {
	buf  []byte
	cut  int // buf[:cut] is already in out
	out  mem.BufferSlice
	refs int // values referenced, not copied
}

var opts = proto.MarshalOptions{Deterministic: true}

func (b *builder) share(v []byte) {
	if len(v) <= InlineMax {
		b.buf = append(b.buf, v...)
		return
	}
	if b.cut < len(b.buf) {
		b.out = append(b.out, mem.SliceBuffer(b.buf[b.cut:len(b.buf):len(b.buf)]))
		b.cut = len(b.buf)
	}
	b.out = append(b.out, mem.SliceBuffer(v))
	b.refs++
}

func (b *builder) finish() mem.BufferSlice {
	if b.cut < len(b.buf) {
		b.out = append(b.out, mem.SliceBuffer(b.buf[b.cut:]))
	}
	return b.out
}

// appendAny appends Any a as field num of the enclosing message: its type_url,
// and its value shared. An Any with unknown fields is marshalled whole.
func (b *builder) appendAny(num protowire.Number, a *anypb.Any) error {
	if a == nil {
		return nil
	}
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		enc, err := opts.Marshal(a)
		if err != nil {
			return err
		}
		b.buf = protowire.AppendTag(b.buf, num, protowire.BytesType)
		b.buf = protowire.AppendBytes(b.buf, enc)
		return nil
	}
	b.buf = protowire.AppendTag(b.buf, num, protowire.BytesType)
	b.buf = protowire.AppendVarint(b.buf, uint64(anySize(a)))
	if a.TypeUrl != "" {
		b.buf = protowire.AppendTag(b.buf, 1, protowire.BytesType)
		b.buf = protowire.AppendString(b.buf, a.TypeUrl)
	}
	if len(a.Value) > 0 {
		b.buf = protowire.AppendTag(b.buf, 2, protowire.BytesType)
		b.buf = protowire.AppendVarint(b.buf, uint64(len(a.Value)))
		b.share(a.Value)
	}
	return nil
}

// anySize is the encoded size of an Any without unknown fields.
func anySize(a *anypb.Any) int {
	n := 0
	if a.TypeUrl != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(a.TypeUrl))
	}
	if len(a.Value) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(a.Value))
	}
	return n
}

// inlined is how many of an Any's value bytes go into the message's own buffer.
func inlined(a *anypb.Any) int {
	if len(a.Value) <= InlineMax {
		return len(a.Value)
	}
	return 0
}

// anyOwn is the bytes appendAny writes into the own buffer for a as field num,
// and the Any's full encoded size.
func anyOwn(a *anypb.Any) (own, size int) {
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		size = proto.Size(a)
		return protowire.SizeTag(2) + protowire.SizeBytes(size), size
	}
	size = anySize(a)
	return protowire.SizeTag(2) + protowire.SizeVarint(uint64(size)) + size - len(a.Value) + inlined(a), size
}

func marshalDelta(m *discoveryv3.DeltaDiscoveryResponse) (mem.BufferSlice, error) {
	// The head (every field but resources) first: written directly when it
	// holds only what pilot sets, else encoded by protobuf.
	var head []byte
	simple := simpleHead(m)
	headSize := 0
	if simple {
		headSize = simpleHeadSize(m)
	} else {
		var err error
		if head, err = opts.Marshal(deltaHead(m)); err != nil {
			return nil, fmt.Errorf("adscodec: marshal DeltaDiscoveryResponse: %w", err)
		}
		headSize = len(head)
	}
	// First the sizes, so the stream's own bytes are allocated once, exactly.
	var shells []proto.Message // nil while every resource is plain
	sizes := make([]int, len(m.Resources))
	own := headSize
	for i, r := range m.Resources {
		size := 0
		if r != nil {
			if plain(r) {
				size = plainSize(r)
			} else {
				if shells == nil {
					shells = make([]proto.Message, len(m.Resources))
				}
				shells[i] = without(r.ProtoReflect(), resourceAny)
				size = proto.Size(shells[i])
			}
			own += size
			if a := r.Resource; a != nil {
				o, s := anyOwn(a)
				own += o
				size += protowire.SizeTag(2) + protowire.SizeBytes(s)
			}
		}
		sizes[i] = size
		own += protowire.SizeTag(2) + protowire.SizeVarint(uint64(size))
	}
	b := builder{buf: make([]byte, 0, own)}
	if simple {
		b.buf = appendSimpleHead(b.buf, m)
	} else {
		b.buf = append(b.buf, head...)
	}
	num := protowire.Number(deltaResources.Number())
	for i, r := range m.Resources {
		b.buf = protowire.AppendTag(b.buf, num, protowire.BytesType)
		b.buf = protowire.AppendVarint(b.buf, uint64(sizes[i]))
		if r == nil {
			continue // protobuf encodes a nil element as an empty message
		}
		var err error
		if shells == nil || shells[i] == nil {
			b.buf = appendPlain(b.buf, r)
		} else if b.buf, err = sized.MarshalAppend(b.buf, shells[i]); err != nil {
			return nil, fmt.Errorf("adscodec: marshal resource %d (%q): %w", i, r.Name, err)
		}
		if err := b.appendAny(protowire.Number(resourceAny.Number()), r.Resource); err != nil {
			return nil, fmt.Errorf("adscodec: marshal resource %d (%q): %w", i, r.Name, err)
		}
	}
	return b.finish(), nil
}

// DeltaSize is proto.Size(m), computed without protobuf's reflection when m
// holds only what pilot sets (a simple head, plain resources whose Anys have no
// unknown fields): pilot sizes every response it sends, and a full sync or a
// fleet joining sends hundreds of resources per response to every stream.
func DeltaSize(m *discoveryv3.DeltaDiscoveryResponse) int {
	if !simpleHead(m) {
		return proto.Size(m)
	}
	n := simpleHeadSize(m)
	for _, r := range m.Resources {
		if r == nil || !plain(r) || r.Resource != nil && len(r.Resource.ProtoReflect().GetUnknown()) > 0 {
			return proto.Size(m)
		}
		size := plainSize(r)
		if r.Resource != nil {
			size += protowire.SizeTag(2) + protowire.SizeBytes(anySize(r.Resource))
		}
		n += protowire.SizeTag(2) + protowire.SizeBytes(size)
	}
	return n
}

// resourceFields are the fields of discoveryv3.Resource plain knows of; a test
// fails when go-control-plane adds one, so plain never drops a new field.
var resourceFields = []protoreflect.Name{"name", "version", "resource", "aliases", "ttl", "cache_control", "metadata", "resource_name"}

// plain reports whether r has nothing but a name, a version and its Any (as
// every Resource pilot sends): its shell is then written without protobuf's
// reflection, allocation-free.
func plain(r *discoveryv3.Resource) bool {
	return r.Aliases == nil && r.Ttl == nil && r.CacheControl == nil && r.Metadata == nil && r.ResourceName == nil &&
		len(r.ProtoReflect().GetUnknown()) == 0
}

// plainSize is the encoded size of a plain r without its Any.
func plainSize(r *discoveryv3.Resource) int {
	n := 0
	if r.Version != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(r.Version))
	}
	if r.Name != "" {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(r.Name))
	}
	return n
}

// appendPlain writes a plain r's version and name as protobuf would (in field
// number order).
func appendPlain(b []byte, r *discoveryv3.Resource) []byte {
	if r.Version != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.Version)
	}
	if r.Name != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, r.Name)
	}
	return b
}

// sized marshals a message whose size was just computed by proto.Size.
var sized = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

func marshalSotW(m *discoveryv3.DiscoveryResponse) (mem.BufferSlice, error) {
	head, err := opts.Marshal(without(m.ProtoReflect(), sotwResources))
	if err != nil {
		return nil, fmt.Errorf("adscodec: marshal DiscoveryResponse: %w", err)
	}
	own := len(head)
	for _, a := range m.Resources {
		own += protowire.SizeTag(2)
		if a == nil {
			own += protowire.SizeVarint(0)
			continue
		}
		o, _ := anyOwn(a)
		own += o - protowire.SizeTag(2)
	}
	b := builder{buf: make([]byte, 0, own)}
	b.buf = append(b.buf, head...)
	for i, a := range m.Resources {
		if a == nil {
			b.buf = protowire.AppendTag(b.buf, protowire.Number(sotwResources.Number()), protowire.BytesType)
			b.buf = protowire.AppendVarint(b.buf, 0)
			continue
		}
		if err := b.appendAny(protowire.Number(sotwResources.Number()), a); err != nil {
			return nil, fmt.Errorf("adscodec: marshal resource %d: %w", i, err)
		}
	}
	return b.finish(), nil
}
