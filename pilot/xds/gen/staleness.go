package gen

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Every Weft sidecar gets exactly one staleness resource (stalenesspb.Name), even
// when no StalenessPolicy selects it: an empty policy tells the sidecar "defaults"
// explicitly, so a removed policy reaches it as a change and not as silence.
//
// Which policy a class comes from, for a sidecar of namespace ns with labels L:
// the StalenessPolicies of ns whose non-empty selector matches L come first, then
// the namespace-wide ones (empty selector), each group by name. Per resource
// class, the first of them with a rule for that class supplies it; classes no
// policy covers are left out and the sidecar keeps its default for them. So a
// workload's own policy beats the namespace's, and a namespace-wide policy can
// still supply the classes a workload policy does not mention.

// stalenessPick is what a sidecar's policy is built from: per class (sorted), the
// policy supplying it. Its key names exactly that, so it is part of the class key.
type stalenessPick struct {
	namespace string
	classes   []string              // sorted
	from      []*ir.StalenessPolicy // from[i] supplies classes[i]
}

func (p stalenessPick) key() string {
	if len(p.classes) == 0 {
		return p.namespace
	}
	var b strings.Builder
	b.WriteString(p.namespace)
	for i, c := range p.classes {
		b.WriteByte(0)
		b.WriteString(c)
		b.WriteByte('=')
		b.WriteString(p.from[i].Name)
	}
	return b.String()
}

type stalenessIndexKey string // namespace
type stalenessSetKey string   // stalenessPick.key()

// stalenessPolicies returns namespace ns's StalenessPolicies: those with a
// selector first, then the namespace-wide ones, each sorted by name.
func stalenessPolicies(mesh *ir.Mesh, ns string) []*ir.StalenessPolicy {
	ps, _ := derive(mesh, stalenessIndexKey(ns), func() ([]*ir.StalenessPolicy, error) {
		var out []*ir.StalenessPolicy
		for _, p := range mesh.Staleness {
			if p.Namespace == ns {
				out = append(out, p)
			}
		}
		slices.SortStableFunc(out, func(a, b *ir.StalenessPolicy) int {
			if wa, wb := len(a.Selector) == 0, len(b.Selector) == 0; wa != wb {
				if wa {
					return 1
				}
				return -1
			}
			return strings.Compare(a.Name, b.Name)
		})
		return out, nil
	})
	return ps
}

// pickStaleness decides, per class, which policy supplies n's rule.
func pickStaleness(mesh *ir.Mesh, n *node.Node) stalenessPick {
	pick := stalenessPick{namespace: n.Namespace}
	if len(mesh.Staleness) == 0 {
		return pick // the common case: nothing to choose, nothing to allocate
	}
	ps := stalenessPolicies(mesh, n.Namespace)
	chosen := map[string]*ir.StalenessPolicy{}
	for _, p := range ps {
		if len(p.Selector) > 0 && !ir.Contains(n.Labels, p.Selector) {
			continue
		}
		for _, r := range p.Rules {
			if _, ok := chosen[r.Resource]; !ok {
				chosen[r.Resource] = p
			}
		}
	}
	pick.classes = ir.SortedKeys(chosen)
	for _, c := range pick.classes {
		pick.from = append(pick.from, chosen[c])
	}
	return pick
}

// stalenessSet is the one-resource set of a pick, built once per mesh and pick.
func stalenessSet(mesh *ir.Mesh, pick stalenessPick) (snapshot.Set, error) {
	return derive(mesh, stalenessSetKey(pick.key()), func() (snapshot.Set, error) {
		pb, err := stalenessPolicy(pick)
		if err != nil {
			return snapshot.Set{}, err
		}
		r, err := snapshot.NewResource(snapshot.StalenessType, stalenesspb.Name, pb)
		if err != nil {
			return snapshot.Set{}, err
		}
		return snapshot.NewSet(map[string]snapshot.Resource{r.Name: r}), nil
	})
}

// stalenessPolicy encodes a pick. resource.Validate already bounds every field
// the way the sidecar does; jitter is checked again because it narrows from a
// float to whole percents here, and a silent truncation would change the policy.
func stalenessPolicy(pick stalenessPick) (*stalenesspb.Policy, error) {
	pb := &stalenesspb.Policy{}
	for i, class := range pick.classes {
		p := pick.from[i]
		idx := slices.IndexFunc(p.Rules, func(r ir.StalenessRule) bool { return r.Resource == class })
		r := p.Rules[idx]
		if r.Jitter < 0 || r.Jitter > 100 || r.Jitter != float64(uint32(r.Jitter)) {
			return nil, fmt.Errorf("StalenessPolicy/%s/%s: rule %s: jitter %v is not a whole percent 0..100", p.Namespace, p.Name, class, r.Jitter)
		}
		pr := &stalenesspb.Rule{Resource: class, OnExpire: r.OnExpire, JitterPercent: uint32(r.Jitter), Source: p.Namespace + "/" + p.Name}
		// Zero is "never": the field stays unset.
		for _, d := range []struct {
			v   time.Duration
			out **durationpb.Duration
		}{{r.WarnAfter, &pr.WarnAfter}, {r.RestrictAfter, &pr.RestrictAfter}, {r.ExpireAfter, &pr.ExpireAfter}} {
			if d.v > 0 {
				*d.out = durationpb.New(d.v)
			}
		}
		pb.Rules = append(pb.Rules, pr)
	}
	return pb, nil
}
