package runtime

import (
	"fmt"
	"strings"

	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
)

// MaxOverrides bounds --staleness flags (one per class is all that makes sense).
const MaxOverrides = 16

// ParseOverrides turns operator overrides "CLASS=WARN/EXPIRE[/ONEXPIRE]" (for
// example "routes=1s/3s/failClosed"; "0" for a threshold that never applies) into
// the policies of the named classes only (Config.Overrides): they beat what pilot
// delivers for those classes. An override carries no jitter: an operator who sets
// a bound means that bound.
func ParseOverrides(overrides []string) (staleness.Set, error) {
	if len(overrides) > MaxOverrides {
		return nil, fmt.Errorf("staleness: %d overrides, limit %d", len(overrides), MaxOverrides)
	}
	rules := make([]staleness.Rule, 0, len(overrides))
	for i, o := range overrides {
		class, spec, ok := strings.Cut(o, "=")
		parts := strings.Split(spec, "/")
		if !ok || class == "" || len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("staleness[%d]: %q: want CLASS=WARN/EXPIRE[/ONEXPIRE]", i, o)
		}
		zero := 0
		r := staleness.Rule{Resource: class, WarnAfter: parts[0], ExpireAfter: parts[1], Jitter: &zero}
		if len(parts) == 3 {
			r.OnExpire = parts[2]
		}
		for _, d := range []*string{&r.WarnAfter, &r.ExpireAfter} {
			if *d == "0" {
				*d = ""
			}
		}
		rules = append(rules, r)
	}
	set, err := staleness.FromRules(rules)
	if err != nil {
		return nil, fmt.Errorf("staleness: %w", err)
	}
	out := make(staleness.Set, len(rules))
	for _, r := range rules {
		out[staleness.Class(r.Resource)] = set[staleness.Class(r.Resource)]
	}
	return out, nil
}
