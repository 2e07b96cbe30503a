package dataplanetest

import (
	"net/netip"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// The TLS shapes of issue 9's "Wire", as pilot's gen emits them.

var (
	ads = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
)

// tls13 and ownCrt are fresh each time: tests mutate what they get.
func tls13() *tlsv3.TlsParameters {
	return &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}
}

func ownCrt() *tlsv3.CertificateProviderPluginInstance {
	return &tlsv3.CertificateProviderPluginInstance{InstanceName: xdsresource.CertProviderInstance}
}

func rootCARef() *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: xdsresource.RootCASecret, SdsConfig: ads}
}

// UpstreamTLSContext is a cluster's UpstreamTlsContext expecting one of sans.
func UpstreamTLSContext(sni string, alpn []string, sans ...string) *tlsv3.UpstreamTlsContext {
	var ms []*tlsv3.SubjectAltNameMatcher
	for _, s := range sans {
		ms = append(ms, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}})
	}
	return &tlsv3.UpstreamTlsContext{Sni: sni, CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsParams: tls13(), AlpnProtocols: alpn, TlsCertificateProviderInstance: ownCrt(),
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: ms},
			ValidationContextSdsSecretConfig: rootCARef(),
		}},
	}}
}

// UpstreamTLS is UpstreamTLSContext as a cluster transport socket.
func UpstreamTLS(sni string, alpn []string, sans ...string) *corev3.TransportSocket {
	return Socket(UpstreamTLSContext(sni, alpn, sans...))
}

// Socket wraps a TLS context as transport socket envoy.transport_sockets.tls.
func Socket(ctx proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: Any(ctx)}}
}

// DownstreamTLSContext is an inbound chain's DownstreamTlsContext.
func DownstreamTLSContext(alpn ...string) *tlsv3.DownstreamTlsContext {
	return &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsParams: tls13(), AlpnProtocols: alpn, TlsCertificateProviderInstance: ownCrt(),
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: rootCARef()},
	}}
}

// WithTransport makes fc match transport ("tls" or "raw_buffer"); with "tls"
// it terminates mTLS (DownstreamTLSContext with ALPN h2, http/1.1).
func WithTransport(fc *listenerv3.FilterChain, transport string) *listenerv3.FilterChain {
	if fc.FilterChainMatch == nil {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{}
	}
	fc.FilterChainMatch.TransportProtocol = transport
	if transport == xdsresource.TransportTLS {
		fc.TransportSocket = Socket(DownstreamTLSContext("h2", "http/1.1"))
	}
	return fc
}

// RootCA is the SDS secret ROOTCA: trust bundle and CRL, PEM.
func RootCA(bundlePEM, crlPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: xdsresource.RootCASecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: bundlePEM}},
		Crl:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: crlPEM}},
	}}}
}

// MarkMTLS marks the endpoints of cla at addrs mTLS-capable (filter_metadata
// weft.mtls = "true"), keeping other weft fields (peer).
func MarkMTLS(cla *endpointv3.ClusterLoadAssignment, addrs ...netip.AddrPort) *endpointv3.ClusterLoadAssignment {
	for _, le := range cla.Endpoints {
		for _, lb := range le.LbEndpoints {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			for _, a := range addrs {
				if sa.GetAddress() != a.Addr().String() || sa.GetPortValue() != uint32(a.Port()) {
					continue
				}
				if lb.Metadata == nil {
					lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
				}
				st := lb.Metadata.FilterMetadata["weft"]
				if st == nil {
					st = &structpb.Struct{Fields: map[string]*structpb.Value{}}
					lb.Metadata.FilterMetadata["weft"] = st
				}
				st.Fields["mtls"] = structpb.NewStringValue("true")
			}
		}
	}
	return cla
}
