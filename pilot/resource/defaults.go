package resource

import "cmp"

// Default values, applied by Decode before validation so stored objects (and
// Encode output) show them explicitly.
const (
	DefaultProtocol       = "HTTP"
	DefaultServiceAccount = "default"
	DefaultWorkloadWeight = 1
	DefaultLoadBalancer   = "ROUND_ROBIN"
	DefaultAuthzAction    = "ALLOW"
	DefaultTrustDomain    = "cluster.local"
	DefaultMTLS           = "STRICT"
	DefaultCertificateTTL = Duration("24h")
	// DefaultServiceAddressRange is where pilot allocates Service VIPs when
	// MeshConfig sets no serviceAddressRange (Istio's auto-allocation range).
	DefaultServiceAddressRange = "240.240.0.0/16"
	// Outbound traffic policies (Istio's names).
	OutboundAllowAny             = "ALLOW_ANY"
	OutboundRegistryOnly         = "REGISTRY_ONLY"
	DefaultOutboundTrafficPolicy = OutboundAllowAny
	// Sidecar container defaults (what injection adds).
	DefaultSidecarImage  = "weft/sidecar:dev"
	DefaultSidecarCPU    = "100m"
	DefaultSidecarMemory = "64Mi"
	// DefaultMeshConfigName is the only allowed MeshConfig name.
	DefaultMeshConfigName = "default"
)

// StalenessDefaults returns the rule a sidecar applies to a resource class when
// no StalenessPolicy selects it (API.md); ApplyDefaults fills omitted rule fields
// from it. Secrets and revocation expire at an absolute bound (certificate
// NotAfter, CRL NextUpdate + 1h) and so have no relative durations here.
func StalenessDefaults(resource string) StalenessRule {
	switch resource {
	case "listeners", "routes", "clusters", "authorization":
		return StalenessRule{Resource: resource, WarnAfter: "5m", ExpireAfter: "24h", OnExpire: "failClosed"}
	case "endpoints":
		return StalenessRule{Resource: resource, WarnAfter: "1m", OnExpire: "serveStale"}
	case "secrets", "revocation":
		return StalenessRule{Resource: resource, OnExpire: "failClosed"}
	}
	return StalenessRule{Resource: resource}
}

// ApplyDefaults fills omitted fields in place. It is idempotent and leaves invalid
// values alone for Validate to report.
func ApplyDefaults(o *Object) {
	if info, ok := kindByName(o.Kind); ok && info.Namespaced && o.Metadata.Namespace == "" {
		o.Metadata.Namespace = DefaultNamespace
	}
	switch s := o.Spec.(type) {
	case *ServiceSpec:
		for i := range s.Ports {
			p := &s.Ports[i]
			if p.TargetPort == 0 {
				p.TargetPort = p.Port
			}
			if p.Protocol == "" {
				p.Protocol = DefaultProtocol
			}
		}
	case *WorkloadSpec:
		if s.ServiceAccount == "" {
			s.ServiceAccount = DefaultServiceAccount
		}
		if s.Weight == 0 {
			s.Weight = DefaultWorkloadWeight
		}
	case *RouteSpec:
		for i := range s.HTTP {
			if r := s.HTTP[i].Route; len(r) == 1 && r[0].Weight == 0 {
				r[0].Weight = 100
			}
		}
	case *DestinationPolicySpec:
		if s.LoadBalancer == "" {
			s.LoadBalancer = DefaultLoadBalancer
		}
	case *AuthorizationPolicySpec:
		if s.Action == "" {
			s.Action = DefaultAuthzAction
		}
	case *StalenessPolicySpec:
		for i := range s.Rules {
			r := &s.Rules[i]
			d := StalenessDefaults(r.Resource)
			if r.WarnAfter == "" {
				r.WarnAfter = d.WarnAfter
			}
			if r.ExpireAfter == "" {
				r.ExpireAfter = d.ExpireAfter
			}
			if r.OnExpire == "" {
				r.OnExpire = d.OnExpire
			}
		}
	case *MeshConfigSpec:
		if s.TrustDomain == "" {
			s.TrustDomain = DefaultTrustDomain
		}
		if s.DefaultMTLS == "" {
			s.DefaultMTLS = DefaultMTLS
		}
		if s.CertificateTTL == "" {
			s.CertificateTTL = DefaultCertificateTTL
		}
		if s.ServiceAddressRange == "" {
			s.ServiceAddressRange = DefaultServiceAddressRange
		}
		if s.OutboundTrafficPolicy == "" {
			s.OutboundTrafficPolicy = DefaultOutboundTrafficPolicy
		}
		if s.Sidecar == nil {
			s.Sidecar = &SidecarConfig{}
		}
		s.Sidecar.Image = cmp.Or(s.Sidecar.Image, DefaultSidecarImage)
		s.Sidecar.CPU = cmp.Or(s.Sidecar.CPU, DefaultSidecarCPU)
		s.Sidecar.Memory = cmp.Or(s.Sidecar.Memory, DefaultSidecarMemory)
	}
}
