package inject

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of MeshConfig.spec.sidecar (API.md) and of the mesh settings.
const (
	DefaultImage  = "weft/sidecar:dev"
	DefaultCPU    = "100m"
	DefaultMemory = "64Mi"
	// DefaultPilotAddress is pilot's TLS xDS and CSR port behind the Service in
	// deploy/ (weft-pilot.weft-system.svc).
	DefaultPilotAddress    = "weft-pilot.weft-system.svc:15012"
	DefaultTrustDomain     = "cluster.local"
	DefaultCARootConfigMap = "weft-ca-root"
	DefaultTokenSecret     = "weft-token-"
	DefaultSystemNamespace = "weft-system"
)

// Bounds of the settings.
const (
	// MinMemory: the sidecar's memory ceiling is 90% of its container's limit
	// and never below 16 MiB (bootstrap/render.MinMemoryLimit), so a limit under
	// 18 MiB could never hold it.
	MinMemory = 18 << 20
	// MaxImageBytes bounds the image reference.
	MaxImageBytes = 512
)

// Sidecar is MeshConfig.spec.sidecar: what injection adds.
type Sidecar struct {
	Image  string `json:"image,omitempty"`  // default DefaultImage
	CPU    string `json:"cpu,omitempty"`    // Kubernetes quantity; the container's CPU request
	Memory string `json:"memory,omitempty"` // Kubernetes quantity; the container's memory request and limit
}

// Mesh is what every injected sidecar is told about the mesh.
type Mesh struct {
	// PilotAddress is the sidecars' --pilot: pilot's TLS xDS and CSR port.
	PilotAddress string
	TrustDomain  string
	// CARootConfigMap names the ConfigMap (key root.pem: pilot's
	// <data-dir>/ca/root.pem) in each injected namespace that the sidecar verifies
	// pilot with (--ca-root).
	CARootConfigMap string
	// TokenSecretPrefix: the pod's bootstrap token is the key "token" of Secret
	// <prefix><serviceAccount> in its namespace (`meshctl token create`).
	TokenSecretPrefix string
	// SystemNamespace is pilot's own namespace: never injected.
	SystemNamespace string
}

// Config is everything injection reads besides the pod. The zero value is the
// defaults.
type Config struct {
	Sidecar Sidecar
	Mesh    Mesh
}

// settings is a validated Config with its quantities parsed.
type settings struct {
	Config
	cpu, memory resource.Quantity
	// goMemLimit is GOMEMLIMIT in bytes: MemoryFraction of the memory limit.
	goMemLimit int64
}

// MemoryFraction of the container's memory limit is the sidecar's soft limit
// (sidecar/app.CgroupMemoryFraction: the sidecar lowers its own ceiling to it
// from the cgroup; GOMEMLIMIT says the same from the first allocation on).
const MemoryFraction = 0.9

// WithDefaults fills what is empty.
func (c Config) WithDefaults() Config {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Sidecar.Image, DefaultImage)
	def(&c.Sidecar.CPU, DefaultCPU)
	def(&c.Sidecar.Memory, DefaultMemory)
	def(&c.Mesh.PilotAddress, DefaultPilotAddress)
	def(&c.Mesh.TrustDomain, DefaultTrustDomain)
	def(&c.Mesh.CARootConfigMap, DefaultCARootConfigMap)
	def(&c.Mesh.TokenSecretPrefix, DefaultTokenSecret)
	def(&c.Mesh.SystemNamespace, DefaultSystemNamespace)
	return c
}

// Validate checks c after defaults; errors name the field (MeshConfig's for the
// sidecar settings).
func (c Config) Validate() error {
	_, err := c.settings()
	return err
}

func (c Config) settings() (*settings, error) {
	c = c.WithDefaults()
	s := &settings{Config: c}
	var errs []error
	img := c.Sidecar.Image
	if len(img) > MaxImageBytes || strings.ContainsFunc(img, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		errs = append(errs, fmt.Errorf("MeshConfig spec.sidecar.image: %q is not an image reference (no spaces, at most %d bytes)", img, MaxImageBytes))
	}
	var err error
	if s.cpu, err = resource.ParseQuantity(c.Sidecar.CPU); err != nil || s.cpu.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("MeshConfig spec.sidecar.cpu: %q is not a positive Kubernetes quantity (e.g. 100m)", c.Sidecar.CPU))
	}
	if s.memory, err = resource.ParseQuantity(c.Sidecar.Memory); err != nil || s.memory.Value() < MinMemory {
		errs = append(errs, fmt.Errorf("MeshConfig spec.sidecar.memory: %q is not a Kubernetes quantity of at least %d bytes (e.g. 64Mi)", c.Sidecar.Memory, MinMemory))
	} else {
		s.goMemLimit = int64(float64(s.memory.Value()) * MemoryFraction)
	}
	if host, port, err := net.SplitHostPort(c.Mesh.PilotAddress); err != nil || host == "" || !validPort(port) {
		errs = append(errs, fmt.Errorf("pilot address: %q is not HOST:PORT", c.Mesh.PilotAddress))
	}
	if !dnsSubdomain(c.Mesh.TrustDomain) {
		errs = append(errs, fmt.Errorf("trust domain: %q is not a DNS name", c.Mesh.TrustDomain))
	}
	if !dnsSubdomain(c.Mesh.CARootConfigMap) {
		errs = append(errs, fmt.Errorf("CA root ConfigMap: %q is not a DNS-1123 subdomain", c.Mesh.CARootConfigMap))
	}
	if !dnsSubdomain(c.Mesh.TokenSecretPrefix + "x") {
		errs = append(errs, fmt.Errorf("token Secret prefix: %q does not start a DNS-1123 subdomain", c.Mesh.TokenSecretPrefix))
	}
	if !dnsLabel(c.Mesh.SystemNamespace) {
		errs = append(errs, fmt.Errorf("system namespace: %q is not a DNS-1123 label", c.Mesh.SystemNamespace))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("injection settings: %w", err)
	}
	return s, nil
}

func validPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0
}

// dnsLabel: Kubernetes DNS-1123 label (namespaces, service accounts the mesh
// identity accepts, container names).
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1) {
			return false
		}
	}
	return true
}

// dnsSubdomain: Kubernetes DNS-1123 subdomain (Secret and ConfigMap names).
func dnsSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !dnsLabel(l) {
			return false
		}
	}
	return true
}

// resourceBytes is n bytes as a Kubernetes quantity (binary suffixes).
func resourceBytes(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
