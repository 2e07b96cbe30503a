package dataplanetest

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// DNSMetadata is the "weft.dns" Struct pilot puts on the outbound listener:
// {"domain": domain, "hosts": {fqdn: [address, ...]}}.
func DNSMetadata(domain string, hosts map[string][]string) *structpb.Struct {
	hs := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for name, addrs := range hosts {
		vs := make([]*structpb.Value, 0, len(addrs))
		for _, a := range addrs {
			vs = append(vs, structpb.NewStringValue(a))
		}
		hs.Fields[name] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain": structpb.NewStringValue(domain),
		"hosts":  structpb.NewStructValue(hs),
	}}
}

// WithDNS sets l's "weft.dns" metadata to md and returns l (until pilot emits
// it, tests build the name table by hand). A nil md leaves l as it is.
func WithDNS(l *listenerv3.Listener, md *structpb.Struct) *listenerv3.Listener {
	if md == nil {
		return l
	}
	if l.Metadata == nil {
		l.Metadata = &corev3.Metadata{}
	}
	if l.Metadata.FilterMetadata == nil {
		l.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	l.Metadata.FilterMetadata[xdsresource.DNSMetadataKey] = md
	return l
}
