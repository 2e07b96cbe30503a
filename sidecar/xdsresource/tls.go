package xdsresource

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// TLS as pilot sends it to Weft sidecars (issue 9's "Wire"): clusters carry an
// UpstreamTlsContext, inbound TLS chains a DownstreamTlsContext, and both validate
// with the SDS secret ROOTCA (trust bundle + CRL). The workload certificate is
// the sidecar's own (certificate provider instance "default"), never sent. What
// the sidecar cannot enforce exactly is refused, naming the field.

// SecretType is SDS's type URL.
const SecretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

const (
	tlsSocketName      = "envoy.transport_sockets.tls"
	upstreamTLSTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	downTLSTypeURL     = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	// CertProviderInstance is the only certificate provider instance: the
	// sidecar's own workload certificate.
	CertProviderInstance = "default"
	// RootCASecret is the only validation secret: trust bundle and CRL.
	RootCASecret = "ROOTCA"
)

// Transport protocols a filter chain may match (filter_chain_match.transport_protocol),
// as Envoy's tls_inspector names them.
const (
	TransportAny = ""
	TransportTLS = "tls"
	TransportRaw = "raw_buffer"
)

// Bounds on TLS contexts.
const (
	MaxSANs        = 64
	MaxSecretBytes = 1 << 20 // trusted_ca plus crl, PEM
	MaxALPN        = 2
)

// UpstreamTLS is a cluster's decoded UpstreamTlsContext: dial mTLS to the
// endpoints marked mTLS-capable, expect one of SANs.
type UpstreamTLS struct {
	SNI  string
	ALPN []string      // subset of {h2, http/1.1}
	SANs []spiffeid.ID // exact URI SANs; the server must present one
	// ValidationSecret names the SDS secret to validate with (RootCASecret).
	ValidationSecret string
}

// DownstreamTLS is an inbound chain's decoded DownstreamTlsContext: terminate
// TLS, require and verify a client certificate.
type DownstreamTLS struct {
	ALPN             []string
	ValidationSecret string
}

// Secret is a decoded SDS validation secret: the trust bundle and the CRL, PEM.
// dataplane parses and cross-checks them (sidecar/dataplane/trust.go).
type Secret struct {
	Name      string
	TrustedCA []byte
	CRL       []byte
}

// setFields lists the proto names of m's populated fields not in allowed.
func setFields(m proto.Message, allowed ...string) []string {
	var extra []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(allowed, string(fd.Name())) {
			extra = append(extra, string(fd.Name()))
		}
		return true
	})
	slices.Sort(extra)
	return extra
}

func onlyFields(e errs, field string, m proto.Message, allowed ...string) error {
	if extra := setFields(m, allowed...); len(extra) > 0 {
		return e.at(field, "unsupported field(s) %s (supported: %s)", strings.Join(extra, ", "), strings.Join(allowed, ", "))
	}
	return nil
}

// transportSocket checks the socket's name and returns its typed_config's type URL.
func transportSocket(e errs, field string, ts *xdswire.TransportSocket, wantURL string) error {
	if ts.GetName() != tlsSocketName {
		return e.at(field+".name", "transport socket %q, only %q is supported", ts.GetName(), tlsSocketName)
	}
	if got := ts.GetTypedConfig().GetTypeUrl(); got != wantURL {
		return e.at(field+".typed_config", "type %q, want %q", got, wantURL)
	}
	return nil
}

func decodeUpstreamTLS(e errs, field string, ts *xdswire.TransportSocket) (*UpstreamTLS, error) {
	if err := transportSocket(e, field, ts, upstreamTLSTypeURL); err != nil {
		return nil, err
	}
	u := &xdswire.UpstreamTlsContext{}
	if err := unpack(ts.GetTypedConfig(), upstreamTLSTypeURL, u); err != nil {
		return nil, e.at(field+".typed_config", "malformed UpstreamTlsContext: %v", err)
	}
	f := field + ".typed_config"
	if err := onlyFields(e, f, u, "sni", "common_tls_context", "max_session_keys"); err != nil {
		return nil, err
	}
	if len(u.GetSni()) > MaxNameBytes {
		return nil, e.at(f+".sni", "is %d bytes, limit %d", len(u.GetSni()), MaxNameBytes)
	}
	out := &UpstreamTLS{SNI: u.GetSni()}
	cf := f + ".common_tls_context"
	ctx := u.GetCommonTlsContext()
	if ctx == nil {
		return nil, e.at(cf, "required")
	}
	var err error
	if out.ALPN, err = decodeCommon(e, cf, ctx); err != nil {
		return nil, err
	}
	cv := ctx.GetCombinedValidationContext()
	if cv == nil {
		return nil, e.at(cf+".combined_validation_context", "required: the server's SPIFFE IDs (default_validation_context) and the SDS secret %s", RootCASecret)
	}
	vf := cf + ".combined_validation_context"
	if err := onlyFields(e, vf, cv, "default_validation_context", "validation_context_sds_secret_config"); err != nil {
		return nil, err
	}
	if out.ValidationSecret, err = rootCA(e, vf+".validation_context_sds_secret_config", cv.GetValidationContextSdsSecretConfig()); err != nil {
		return nil, err
	}
	dv := cv.GetDefaultValidationContext()
	df := vf + ".default_validation_context"
	if err := onlyFields(e, df, dv, "match_typed_subject_alt_names"); err != nil {
		return nil, err
	}
	sans := dv.GetMatchTypedSubjectAltNames()
	if len(sans) == 0 {
		return nil, e.at(df+".match_typed_subject_alt_names", "required: without expected SPIFFE IDs any server of the mesh would be accepted")
	}
	if len(sans) > MaxSANs {
		return nil, e.at(df+".match_typed_subject_alt_names", "%d matchers, limit %d", len(sans), MaxSANs)
	}
	for i, s := range sans {
		sf := fmt.Sprintf("%s.match_typed_subject_alt_names[%d]", df, i)
		if err := onlyFields(e, sf, s, "san_type", "matcher"); err != nil {
			return nil, err
		}
		if s.GetSanType() != xdswire.SubjectAltNameMatcher_URI {
			return nil, e.at(sf+".san_type", "%s, only URI (a SPIFFE ID) is supported", s.GetSanType())
		}
		id, err := exactSPIFFE(e, sf+".matcher", s.GetMatcher())
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out.SANs, id) {
			out.SANs = append(out.SANs, id)
		}
	}
	return out, nil
}

func exactSPIFFE(e errs, field string, m *xdswire.StringMatcher) (spiffeid.ID, error) {
	if err := onlyFields(e, field, m, "exact"); err != nil {
		return spiffeid.ID{}, err
	}
	id, err := spiffeid.FromString(m.GetExact())
	if err != nil {
		return spiffeid.ID{}, e.at(field+".exact", "%q is not a SPIFFE ID: %v", m.GetExact(), err)
	}
	return id, nil
}

func decodeDownstreamTLS(e errs, field string, ts *xdswire.TransportSocket) (*DownstreamTLS, error) {
	if err := transportSocket(e, field, ts, downTLSTypeURL); err != nil {
		return nil, err
	}
	d := &xdswire.DownstreamTlsContext{}
	if err := unpack(ts.GetTypedConfig(), downTLSTypeURL, d); err != nil {
		return nil, e.at(field+".typed_config", "malformed DownstreamTlsContext: %v", err)
	}
	f := field + ".typed_config"
	if err := onlyFields(e, f, d, "require_client_certificate", "common_tls_context"); err != nil {
		return nil, err
	}
	if !d.GetRequireClientCertificate().GetValue() {
		return nil, e.at(f+".require_client_certificate", "must be true: sidecars accept mutual TLS only")
	}
	cf := f + ".common_tls_context"
	ctx := d.GetCommonTlsContext()
	if ctx == nil {
		return nil, e.at(cf, "required")
	}
	out := &DownstreamTLS{}
	var err error
	if out.ALPN, err = decodeCommon(e, cf, ctx); err != nil {
		return nil, err
	}
	switch {
	case ctx.GetValidationContextSdsSecretConfig() != nil:
		out.ValidationSecret, err = rootCA(e, cf+".validation_context_sds_secret_config", ctx.GetValidationContextSdsSecretConfig())
	case ctx.GetCombinedValidationContext() != nil:
		cv := ctx.GetCombinedValidationContext()
		vf := cf + ".combined_validation_context"
		if err := onlyFields(e, vf, cv, "validation_context_sds_secret_config"); err != nil {
			return nil, err
		}
		out.ValidationSecret, err = rootCA(e, vf+".validation_context_sds_secret_config", cv.GetValidationContextSdsSecretConfig())
	default:
		return nil, e.at(cf+".validation_context_sds_secret_config", "required: client certificates validate with the SDS secret %s", RootCASecret)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeCommon checks what both contexts share and returns the ALPN list.
func decodeCommon(e errs, cf string, ctx *xdswire.CommonTlsContext) ([]string, error) {
	if err := onlyFields(e, cf, ctx, "tls_params", "alpn_protocols", "tls_certificate_provider_instance",
		"combined_validation_context", "validation_context_sds_secret_config"); err != nil {
		return nil, err
	}
	if p := ctx.GetTlsParams(); p != nil {
		pf := cf + ".tls_params"
		if err := onlyFields(e, pf, p, "tls_minimum_protocol_version", "tls_maximum_protocol_version"); err != nil {
			return nil, err
		}
		for name, v := range map[string]xdswire.TlsParameters_TlsProtocol{
			"tls_minimum_protocol_version": p.GetTlsMinimumProtocolVersion(),
			"tls_maximum_protocol_version": p.GetTlsMaximumProtocolVersion(),
		} {
			if v != xdswire.TlsParameters_TLS_AUTO && v != xdswire.TlsParameters_TLSv1_3 {
				return nil, e.at(pf+"."+name, "%s: sidecars speak TLS 1.3 only", v)
			}
		}
	}
	alpn := ctx.GetAlpnProtocols()
	if len(alpn) > MaxALPN {
		return nil, e.at(cf+".alpn_protocols", "%d protocols, limit %d", len(alpn), MaxALPN)
	}
	for i, a := range alpn {
		if a != "h2" && a != "http/1.1" {
			return nil, e.at(fmt.Sprintf("%s.alpn_protocols[%d]", cf, i), "%q: only h2 and http/1.1 are supported", a)
		}
	}
	cp := ctx.GetTlsCertificateProviderInstance()
	if cp == nil {
		return nil, e.at(cf+".tls_certificate_provider_instance", "required: instance_name %q, the sidecar's own workload certificate", CertProviderInstance)
	}
	if err := onlyFields(e, cf+".tls_certificate_provider_instance", cp, "instance_name"); err != nil {
		return nil, err
	}
	if cp.GetInstanceName() != CertProviderInstance {
		return nil, e.at(cf+".tls_certificate_provider_instance.instance_name", "%q, only %q (the workload certificate) exists", cp.GetInstanceName(), CertProviderInstance)
	}
	return slices.Clone(alpn), nil
}

// rootCA checks an SDS reference: the name RootCASecret, delivered over ADS.
func rootCA(e errs, field string, s *xdswire.SdsSecretConfig) (string, error) {
	if s == nil {
		return "", e.at(field, "required: the SDS secret %s", RootCASecret)
	}
	if err := onlyFields(e, field, s, "name", "sds_config"); err != nil {
		return "", err
	}
	if s.GetName() != RootCASecret {
		return "", e.at(field+".name", "%q, only %q (trust bundle and CRL) is supported", s.GetName(), RootCASecret)
	}
	if s.GetSdsConfig().GetAds() == nil {
		return "", e.at(field+".sds_config", "must be ads: secrets come on the ADS stream, covered by the signed manifest")
	}
	return s.GetName(), nil
}

func decodeSecret(m *xdswire.Secret) (*Secret, error) {
	e := errs{kind: "secret", name: m.GetName()}
	if err := checkName(e, "name", m.GetName()); err != nil {
		return nil, err
	}
	if m.GetTlsCertificate() != nil {
		return nil, e.at("tls_certificate", "refused: the workload certificate is the sidecar's own and is never sent")
	}
	if err := onlyFields(e, "", m, "name", "validation_context"); err != nil {
		return nil, err
	}
	vc := m.GetValidationContext()
	if vc == nil {
		return nil, e.at("validation_context", "required: trusted_ca and crl")
	}
	if err := onlyFields(e, "validation_context", vc, "trusted_ca", "crl"); err != nil {
		return nil, err
	}
	ca, err := inlineBytes(e, "validation_context.trusted_ca", vc.GetTrustedCa())
	if err != nil {
		return nil, err
	}
	crl, err := inlineBytes(e, "validation_context.crl", vc.GetCrl())
	if err != nil {
		return nil, err
	}
	if n := len(ca) + len(crl); n > MaxSecretBytes {
		return nil, e.at("validation_context", "trusted_ca and crl are %d bytes, limit %d", n, MaxSecretBytes)
	}
	return &Secret{Name: m.GetName(), TrustedCA: slices.Clone(ca), CRL: slices.Clone(crl)}, nil
}

func inlineBytes(e errs, field string, ds *xdswire.DataSource) ([]byte, error) {
	if ds == nil {
		return nil, e.at(field, "required")
	}
	b := ds.GetInlineBytes()
	if len(b) == 0 {
		if ds.GetSpecifier() != nil {
			return nil, e.at(field, "only inline_bytes is supported")
		}
		return nil, e.at(field+".inline_bytes", "must not be empty")
	}
	return b, nil
}
