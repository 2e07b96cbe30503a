package xdsresource_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const reviewsID = "spiffe://cluster.local/ns/shop/sa/reviews"

func tlsCluster(ts *corev3.TransportSocket) (*xdsresource.Cluster, error) {
	c := dt.EDSCluster("outbound|9080||reviews.shop", dt.ClusterOpts{})
	c.TransportSocket = ts
	_, v, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(c))
	if err != nil {
		return nil, err
	}
	return v.(*xdsresource.Cluster), nil
}

func TestUpstreamTLSDecodes(t *testing.T) {
	c, err := tlsCluster(dt.UpstreamTLS("outbound|9080||reviews.shop", []string{"h2"}, reviewsID, "spiffe://cluster.local/ns/shop/sa/reviews-v2", reviewsID))
	if err != nil {
		t.Fatal(err)
	}
	want := &xdsresource.UpstreamTLS{SNI: "outbound|9080||reviews.shop", ALPN: []string{"h2"},
		SANs:             []spiffeid.ID{spiffeid.RequireFromString(reviewsID), spiffeid.RequireFromString("spiffe://cluster.local/ns/shop/sa/reviews-v2")},
		ValidationSecret: "ROOTCA"}
	if d := cmp.Diff(want, c.TLS, cmp.Comparer(func(a, b spiffeid.ID) bool { return a == b })); d != "" {
		t.Errorf("decoded TLS (-want +got):\n%s", d)
	}
	if refs := c.AllReferences(); fmt.Sprint(refs) != fmt.Sprint(map[string][]string{xdsresource.SecretType: {"ROOTCA"}}) {
		t.Errorf("references %v, want the ROOTCA secret", refs)
	}
}

func TestUpstreamTLSRefusals(t *testing.T) {
	sans := func(n int) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf("spiffe://cluster.local/ns/shop/sa/sa%d", i))
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		mutate func(u *tlsv3.UpstreamTlsContext, ts *corev3.TransportSocket)
		field  string
	}{
		{"socket name", func(_ *tlsv3.UpstreamTlsContext, ts *corev3.TransportSocket) {
			ts.Name = "envoy.transport_sockets.raw_buffer"
		}, "transport_socket.name"},
		{"TLS 1.2", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.TlsParams.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TLSv1_2
		}, "tls_minimum_protocol_version"},
		{"cipher suites", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.TlsParams.CipherSuites = []string{"ECDHE-RSA-AES128-GCM-SHA256"}
		}, "cipher_suites"},
		{"alpn", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.AlpnProtocols = []string{"h3"}
		}, "alpn_protocols[0]"},
		{"alpn count", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.AlpnProtocols = []string{"h2", "http/1.1", "h2"}
		}, "alpn_protocols"},
		{"inline certificate", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{}}
		}, "tls_certificates"},
		{"no certificate provider", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.TlsCertificateProviderInstance = nil
		}, "tls_certificate_provider_instance"},
		{"other provider", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.TlsCertificateProviderInstance.InstanceName = "file"
		}, "instance_name"},
		{"no SANs", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.MatchTypedSubjectAltNames = nil
		}, "match_typed_subject_alt_names"},
		{"DNS SAN", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.MatchTypedSubjectAltNames[0].SanType = tlsv3.SubjectAltNameMatcher_DNS
		}, "san_type"},
		{"prefix SAN", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.MatchTypedSubjectAltNames[0].Matcher =
				&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://"}}
		}, "matcher"},
		{"not a SPIFFE ID", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.MatchTypedSubjectAltNames[0].Matcher =
				&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "https://reviews"}}
		}, "matcher.exact"},
		{"trusted_ca inline", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.TrustedCa = &corev3.DataSource{}
		}, "trusted_ca"},
		{"other secret", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().ValidationContextSdsSecretConfig.Name = "mine"
		}, "validation_context_sds_secret_config.name"},
		{"secret not over ADS", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.GetCombinedValidationContext().ValidationContextSdsSecretConfig.SdsConfig = nil
		}, "sds_config"},
		{"no validation", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.ValidationContextType = nil
		}, "combined_validation_context"},
		{"proxyless provider validation", func(u *tlsv3.UpstreamTlsContext, _ *corev3.TransportSocket) {
			u.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextCertificateProviderInstance{
				//lint:ignore SA1019 the proxyless form pilot sends grpc-go; a sidecar refuses it
				ValidationContextCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{InstanceName: "default", CertificateName: "ROOTCA"}}
		}, "validation_context_certificate_provider_instance"},
		{"SANs at bound + 1", func(u *tlsv3.UpstreamTlsContext, ts *corev3.TransportSocket) {
			*u = *dt.UpstreamTLSContext("x", nil, sans(xdsresource.MaxSANs+1)...)
		}, "match_typed_subject_alt_names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := dt.UpstreamTLSContext("outbound|9080||reviews.shop", []string{"h2"}, reviewsID)
			ts := dt.Socket(u)
			tc.mutate(u, ts)
			if ts.GetTypedConfig() != nil && ts.Name != "envoy.transport_sockets.raw_buffer" {
				ts.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: dt.Any(u)}
			}
			_, err := tlsCluster(ts)
			if !errors.Is(err, xdsresource.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want invalid naming %s", err, tc.field)
			}
		})
	}
	if _, err := tlsCluster(dt.UpstreamTLS("x", nil, sans(xdsresource.MaxSANs)...)); err != nil {
		t.Errorf("MaxSANs SANs: %v", err)
	}
}

func TestEndpointMTLSMark(t *testing.T) {
	a, b := dt.MustAddr("10.0.0.1:15006"), dt.MustAddr("10.0.0.2:15006")
	cla := dt.MarkMTLS(dt.MarkPeer(dt.Endpoints("e", a, b), a, b), a)
	_, v, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(cla))
	if err != nil {
		t.Fatal(err)
	}
	eps := v.(*xdsresource.Endpoints).Endpoints
	if !eps[0].MTLS || !eps[0].Peer || eps[1].MTLS || !eps[1].Peer {
		t.Errorf("endpoints %+v, want the first mTLS-capable, both peers", eps)
	}
}

func decodeTLSListener(l *listenerv3.Listener) (*xdsresource.Listener, error) {
	_, v, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l))
	if err != nil {
		return nil, err
	}
	return v.(*xdsresource.Listener), nil
}

func TestDownstreamTLSChains(t *testing.T) {
	addr := dt.MustAddr("0.0.0.0:15006")
	l, err := decodeTLSListener(dt.Listener("inbound", addr,
		dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS),
		dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportRaw)))
	if err != nil {
		t.Fatal(err)
	}
	if c := l.FilterChains[0]; c.TransportProtocol != "tls" || c.TLS == nil || c.TLS.ValidationSecret != "ROOTCA" ||
		fmt.Sprint(c.TLS.ALPN) != "[h2 http/1.1]" {
		t.Errorf("tls chain %+v", c)
	}
	if c := l.FilterChains[1]; c.TransportProtocol != "raw_buffer" || c.TLS != nil {
		t.Errorf("raw chain %+v", c)
	}
	if refs := l.AllReferences(); len(refs[xdsresource.SecretType]) != 1 {
		t.Errorf("references %v, want ROOTCA", refs)
	}
	for _, tc := range []struct {
		name  string
		chain func() *listenerv3.FilterChain
		field string
	}{
		{"duplicate match", nil, "same match"},
		{"TLS socket without tls match", func() *listenerv3.FilterChain {
			fc := dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS)
			fc.FilterChainMatch.TransportProtocol = ""
			return fc
		}, "transport_protocol"},
		{"tls match without socket (passthrough)", func() *listenerv3.FilterChain {
			fc := dt.HTTPChain(15006, "r")
			fc.FilterChainMatch.TransportProtocol = "tls"
			return fc
		}, "passthrough"},
		{"unknown transport", func() *listenerv3.FilterChain {
			fc := dt.HTTPChain(15006, "r")
			fc.FilterChainMatch.TransportProtocol = "quic"
			return fc
		}, "transport_protocol"},
		{"client certificate optional", func() *listenerv3.FilterChain {
			fc := dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS)
			d := dt.DownstreamTLSContext("h2")
			d.RequireClientCertificate = wrapperspb.Bool(false)
			fc.TransportSocket = dt.Socket(d)
			return fc
		}, "require_client_certificate"},
		{"session ticket keys", func() *listenerv3.FilterChain {
			fc := dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS)
			d := dt.DownstreamTLSContext("h2")
			d.SessionTicketKeysType = &tlsv3.DownstreamTlsContext_DisableStatelessSessionResumption{DisableStatelessSessionResumption: true}
			fc.TransportSocket = dt.Socket(d)
			return fc
		}, "disable_stateless_session_resumption"},
		{"upstream context on a chain", func() *listenerv3.FilterChain {
			fc := dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS)
			fc.TransportSocket = dt.UpstreamTLS("x", nil, reviewsID)
			return fc
		}, "typed_config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chains := []*listenerv3.FilterChain{dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS)}
			if tc.chain == nil {
				chains = append(chains, dt.WithTransport(dt.HTTPChain(15006, "r"), xdsresource.TransportTLS))
			} else {
				chains = []*listenerv3.FilterChain{tc.chain()}
			}
			_, err := decodeTLSListener(dt.Listener("inbound", addr, chains...))
			if !errors.Is(err, xdsresource.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want invalid naming %s", err, tc.field)
			}
		})
	}
}

func TestSecretDecode(t *testing.T) {
	_, v, err := xdsresource.Decode(xdsresource.SecretType, dt.Any(dt.RootCA([]byte("bundle"), []byte("crl"))))
	if err != nil {
		t.Fatal(err)
	}
	if s := v.(*xdsresource.Secret); s.Name != "ROOTCA" || string(s.TrustedCA) != "bundle" || string(s.CRL) != "crl" {
		t.Errorf("secret %+v", s)
	}
	big := make([]byte, xdsresource.MaxSecretBytes/2)
	for _, tc := range []struct {
		name   string
		secret *tlsv3.Secret
		field  string
	}{
		{"workload certificate", &tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{}}}, "tls_certificate"},
		{"no crl", func() *tlsv3.Secret {
			s := dt.RootCA([]byte("b"), []byte("c"))
			s.GetValidationContext().Crl = nil
			return s
		}(), "validation_context.crl"},
		{"empty trusted_ca", dt.RootCA(nil, []byte("c")), "validation_context.trusted_ca"},
		{"file source", func() *tlsv3.Secret {
			s := dt.RootCA([]byte("b"), []byte("c"))
			s.GetValidationContext().TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/ca.pem"}}
			return s
		}(), "inline_bytes"},
		{"SAN matchers in the secret", func() *tlsv3.Secret {
			s := dt.RootCA([]byte("b"), []byte("c"))
			s.GetValidationContext().MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{}}
			return s
		}(), "match_typed_subject_alt_names"},
		{"size bound + 1", dt.RootCA(big, append(big, 'x')), "limit"},
	} {
		_, _, err := xdsresource.Decode(xdsresource.SecretType, dt.Any(tc.secret))
		if !errors.Is(err, xdsresource.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err %v, want invalid naming %s", tc.name, err, tc.field)
		}
	}
	if _, _, err := xdsresource.Decode(xdsresource.SecretType, dt.Any(dt.RootCA(big, big))); err != nil {
		t.Errorf("secret at the size bound: %v", err)
	}
}
