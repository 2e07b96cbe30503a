package xdsresource

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// ErrInvalid is wrapped by every validation error so callers can tell a bad resource
// (NACK) from an internal failure.
var ErrInvalid = errors.New("invalid resource")

// FieldError names the resource and the field a validation failed on. Its message is
// the NACK detail: `route "outbound|9080": virtual_hosts[0].routes[2].match.safe_regex: invalid RE2: ...`.
type FieldError struct {
	Kind  string // listener | route | cluster | endpoints
	Name  string
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Name == "" && e.Kind == "LbEndpoint" { // its wrapper names it
		return fmt.Sprintf("%s: %s: %s", e.Kind, e.Field, e.Msg)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s %q: %s", e.Kind, e.Name, e.Msg)
	}
	return fmt.Sprintf("%s %q: %s: %s", e.Kind, e.Name, e.Field, e.Msg)
}

// Unwrap lets errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// errs builds FieldErrors for one resource.
type errs struct{ kind, name string }

func (e errs) at(field, format string, args ...any) error {
	return &FieldError{Kind: e.kind, Name: e.name, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// MaxResourceBytes bounds one serialized resource.
const MaxResourceBytes = 4 << 20

// Decode turns one xDS resource into its Weft type: *Listener, *RouteConfig, *Cluster,
// *Endpoints, *LbEndpoint, *Secret or *Staleness. It returns the resource name (also when validation fails and the name
// could be read) so the xDS client can NACK by name; "" for an LbEndpoint,
// whose body has none (its wrapper names it).
func Decode(typeURL string, a *anypb.Any) (string, any, error) {
	if a == nil {
		return "", nil, fmt.Errorf("%w: nil resource of type %s", ErrInvalid, typeURL)
	}
	if a.GetTypeUrl() != typeURL {
		return "", nil, fmt.Errorf("%w: resource has type %q, want %q", ErrInvalid, a.GetTypeUrl(), typeURL)
	}
	if len(a.GetValue()) > MaxResourceBytes {
		return "", nil, fmt.Errorf("%w: %s resource is %d bytes, limit %d", ErrInvalid, typeURL, len(a.GetValue()), MaxResourceBytes)
	}
	switch typeURL {
	case ListenerType:
		m := &xdswire.Listener{}
		if err := unmarshal(a, m, "listener"); err != nil {
			return "", nil, err
		}
		v, err := decodeListener(m)
		if err != nil {
			return m.GetName(), nil, err // an untyped nil, never a typed nil pointer
		}
		return m.GetName(), v, nil
	case RouteType:
		if rc, ok := fastRouteConfig(a.GetValue()); ok {
			return rc.Name, rc, nil
		}
		m := &xdswire.RouteConfiguration{}
		if err := unmarshal(a, m, "route"); err != nil {
			return "", nil, err
		}
		v, err := decodeRouteConfig(m)
		if err != nil {
			return m.GetName(), nil, err // an untyped nil, never a typed nil pointer
		}
		return m.GetName(), v, nil
	case ClusterType:
		m := &xdswire.Cluster{}
		if err := unmarshal(a, m, "cluster"); err != nil {
			return "", nil, err
		}
		v, err := decodeCluster(m)
		if err != nil {
			return m.GetName(), nil, err // an untyped nil, never a typed nil pointer
		}
		return m.GetName(), v, nil
	case EndpointType:
		m := &xdswire.ClusterLoadAssignment{}
		if err := unmarshal(a, m, "endpoints"); err != nil {
			return "", nil, err
		}
		v, err := decodeEndpoints(m)
		if err != nil {
			return m.GetClusterName(), nil, err // an untyped nil, never a typed nil pointer
		}
		return m.GetClusterName(), v, nil
	case LbEndpointType:
		m := &xdswire.LbEndpoint{}
		if err := unmarshal(a, m, "LbEndpoint"); err != nil {
			return "", nil, err
		}
		v, err := decodeLEDSEndpoint(m)
		if err != nil {
			return "", nil, err // an untyped nil, never a typed nil pointer
		}
		return "", v, nil // named by its wrapper only
	case SecretType:
		m := &xdswire.Secret{}
		if err := unmarshal(a, m, "secret"); err != nil {
			return "", nil, err
		}
		v, err := decodeSecret(m)
		if err != nil {
			return m.GetName(), nil, err // an untyped nil, never a typed nil pointer
		}
		return m.GetName(), v, nil
	case StalenessType:
		m := &stalenesspb.Policy{}
		if err := unmarshal(a, m, "staleness"); err != nil {
			return "", nil, err
		}
		v, err := decodeStaleness(m)
		if err != nil {
			return stalenesspb.Name, nil, err // an untyped nil, never a typed nil pointer
		}
		// The resource carries no name: there is one per sidecar.
		return stalenesspb.Name, v, nil
	}
	return "", nil, fmt.Errorf("%w: unsupported type %q", ErrInvalid, typeURL)
}

// unpack decodes an Any carrying the Envoy message named by url into m, the
// trimmed type mirroring it. As anypb's UnmarshalTo, it compares the name after
// the URL's last '/' (any host); UnmarshalTo itself cannot be used: it compares
// with m's own full name, which is not Envoy's.
func unpack(a *anypb.Any, url string, m proto.Message) error {
	want := url[strings.LastIndexByte(url, '/')+1:]
	got := a.GetTypeUrl()
	if got = got[strings.LastIndexByte(got, '/')+1:]; got != want {
		return fmt.Errorf("mismatched message type: got %q, want %q", got, want)
	}
	return proto.Unmarshal(a.GetValue(), m)
}

func unmarshal(a *anypb.Any, m proto.Message, kind string) error {
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return fmt.Errorf("%w: %s: malformed protobuf: %v", ErrInvalid, kind, err)
	}
	return nil
}

// checkName validates a resource name.
func checkName(e errs, field, n string) error {
	switch {
	case n == "":
		return e.at(field, "must not be empty")
	case len(n) > MaxNameBytes:
		return e.at(field, "is %d bytes, limit %d", len(n), MaxNameBytes)
	}
	return nil
}

// compileRE2 compiles a safe_regex; Go's regexp is RE2, so anything it accepts runs
// in linear time.
func compileRE2(e errs, field, re string) (*regexp.Regexp, error) {
	if len(re) > MaxRegexBytes {
		return nil, e.at(field, "regex is %d bytes, limit %d", len(re), MaxRegexBytes)
	}
	// Envoy matches the whole value; anchor so both agree.
	r, err := regexp.Compile("^(?:" + re + ")$")
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return nil, e.at(field, "invalid RE2: %s", se.Code)
		}
		return nil, e.at(field, "invalid RE2: %v", err)
	}
	return r, nil
}

// duration converts a proto duration; nil gives def.
func duration(e errs, field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, e.at(field, "%v", err)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, e.at(field, "must not be negative")
	}
	return v, nil
}

func lower(s string) string { return strings.ToLower(s) }
