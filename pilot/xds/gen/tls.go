package gen

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Where gen differs from the issue #9 design's "Wire", and why:
//   - proxyless (grpc-go) clusters and server listeners carry no tls_params
//     (grpc-go NACKs them), take roots from validation_context
//     .ca_certificate_provider_instance{default, ROOTCA} (gRFC A29; with the
//     design's combined validation_context_certificate_provider_instance
//     grpc-go would take its identity only from the deprecated field and send
//     no client certificate) and SANs from the untyped match_subject_alt_names
//     (the only one grpc-go reads); a proxyless client gets TLS only to
//     clusters all of whose endpoints take mTLS (grpc-go cannot choose per
//     endpoint), and a proxyless server's PERMISSIVE is served as STRICT
//     (grpc-go cannot sniff; compile warns).
//   - a cluster's SANs are the identities of its own mTLS endpoints (a subset
//     cluster's are the subset's), and a cluster none of whose endpoints takes
//     mTLS has no transport socket: TLS is only ever used to those endpoints.
//   - an endpoint says mtls only when its node proved exactly the endpoint's
//     SPIFFE ID and its mode is not DISABLE (Istio's auto-mTLS honours the
//     server's mode the same way); DISABLE keeps today's chains.
//   - TLS chains are named "<chain>|tls" and "<chain>|raw".
//   - RBAC: see rbac.go (filter names, one policy per rule, TCP rules).
//
// mTLS on the wire (the issue #9 design's "Wire"). Only nodes pilot
// authenticated (node.Identity) get any of it: their inbound listener's TLS
// chains and their outbound clusters' transport sockets. The workload
// certificate never travels: the sidecar holds its own ("default"
// certificate provider instance); the trust bundle and CRL arrive as the SDS
// Secret RootCASecretName (pilot/xds/publish adds it).
const (
	TLSTransportSocketName = "envoy.transport_sockets.tls"
	// RootCASecretName is the SDS Secret with the trust bundle and the CRL.
	RootCASecretName = "ROOTCA"
	// CertProviderInstance names the node's own certificate (a Weft sidecar's
	// SVID; a proxyless gRPC node's bootstrap certificate_providers entry,
	// which also serves the roots as certificate RootCASecretName).
	CertProviderInstance = "default"
	// Inbound filter chains are matched on the first byte, as Envoy's
	// tls_inspector does: a TLS ClientHello (0x16) is "tls", anything else
	// "raw_buffer".
	TransportProtocolTLS = "tls"
	TransportProtocolRaw = "raw_buffer"
)

// ALPN of the mesh's TLS: the pooled peer-sidecar hop is HTTP/2.
var (
	downstreamALPN = []string{"h2", "http/1.1"}
	upstreamALPN   = []string{"h2"}
)

func transportSocket(ctx proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: TLSTransportSocketName, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

var tls13 = &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}

func ownCertificate() *tlsv3.CertificateProviderPluginInstance {
	return &tlsv3.CertificateProviderPluginInstance{InstanceName: CertProviderInstance}
}

func rootCASDS() *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: RootCASecretName, SdsConfig: ads()}
}

// sidecarDownstreamTLS is a Weft sidecar's inbound TLS: TLS 1.3, a client
// certificate required and verified against the ROOTCA bundle and CRL.
func sidecarDownstreamTLS() *corev3.TransportSocket {
	return transportSocket(&tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      tls13,
			AlpnProtocols:                  downstreamALPN,
			TlsCertificateProviderInstance: ownCertificate(),
			ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: rootCASDS()},
		},
	})
}

// proxylessDownstreamTLS is a grpc-go xDS server's: grpc-go reads no SDS, and
// NACKs tls_params, so roots come from its certificate provider (gRFC A29's
// ca_certificate_provider_instance) and the TLS version is grpc-go's own (1.2+).
func proxylessDownstreamTLS() *corev3.TransportSocket {
	return transportSocket(&tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: ownCertificate(),
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertProviderInstance, CertificateName: RootCASecretName},
			}},
		},
	})
}

// sidecarUpstreamTLS is a Weft sidecar's TLS to c: SNI is the cluster name, the
// peer's SPIFFE ID must be one of c's identities. nil when no endpoint of c
// takes mTLS (the client never uses TLS to it).
func sidecarUpstreamTLS(c *ir.Cluster) *corev3.TransportSocket {
	if len(c.Identities) == 0 {
		return nil
	}
	sans := make([]*tlsv3.SubjectAltNameMatcher, 0, len(c.Identities))
	for _, id := range c.Identities {
		sans = append(sans, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: exact(id)})
	}
	common := &tlsv3.CommonTlsContext{
		TlsParams:                      tls13,
		TlsCertificateProviderInstance: ownCertificate(),
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
			ValidationContextSdsSecretConfig: rootCASDS(),
		}},
	}
	if c.Protocol.IsHTTP() {
		common.AlpnProtocols = upstreamALPN
	}
	return transportSocket(&tlsv3.UpstreamTlsContext{Sni: c.Name, CommonTlsContext: common})
}

// proxylessUpstreamTLS is a grpc-go client's TLS to c. grpc-go reads only the
// untyped match_subject_alt_names (matched against every SAN, URIs included),
// takes roots from its certificate provider, NACKs tls_params and ignores ALPN.
// grpc-go uses TLS to every endpoint of a cluster with a transport socket, so
// c gets one only when every endpoint takes mTLS; otherwise nil (plaintext).
func proxylessUpstreamTLS(c *ir.Cluster) *corev3.TransportSocket {
	if len(c.Identities) == 0 {
		return nil
	}
	for _, ep := range c.Endpoints {
		if !ep.MTLS {
			return nil
		}
	}
	sans := make([]*matcherv3.StringMatcher, 0, len(c.Identities))
	for _, id := range c.Identities {
		sans = append(sans, exact(id))
	}
	return transportSocket(&tlsv3.UpstreamTlsContext{Sni: c.Name, CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: ownCertificate(),
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertProviderInstance, CertificateName: RootCASecretName},
			MatchSubjectAltNames:          sans, //lint:ignore SA1019 grpc-go reads only this (deprecated) field, not match_typed_subject_alt_names
		}},
	}})
}

func exact(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}
