package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/weft-mesh/weft/pilot/resource"
)

// MaxMutationsPerApply bounds one atomic Apply so a single request cannot build an
// unbounded transaction (one `meshctl apply -f dir/` of a large mesh fits easily).
const MaxMutationsPerApply = 10_000

// MaxObjectBytes bounds one stored object as encoded by the backend (JSON), the
// same bound the decoder puts on one document.
const MaxObjectBytes = resource.MaxObjectBytes

// MaxApplyBytes bounds the encoded objects of one Apply, so one transaction (and
// the memory it takes) stays bounded even at MaxMutationsPerApply.
const MaxApplyBytes = 64 << 20

// ErrWatchOverflow is a watcher's Err when it fell more than the backend's watch
// buffer behind and was cut off so that appliers never wait for it. The consumer
// should Watch again from the last revision it processed.
var ErrWatchOverflow = errors.New("watcher fell behind its buffer")

// Compactor is implemented by stores whose history can be trimmed. After
// Compact(ctx, before), history entries with revision < before are gone: History
// no longer returns them and Watch(from) with from+1 < before returns ErrCompacted.
type Compactor interface {
	Compact(ctx context.Context, before Revision) error
}

// RevisionApplier is implemented by stores that can make an Apply
// conditional on the whole store: ApplyAt commits muts (as Apply, with their
// own If-Match) only if the store revision is still head, and otherwise
// returns a *RevisionConflictError and writes nothing. A writer that derives
// one object from others (pilot's VIP allocation reads every Service) uses
// it so that a write committed in between, by another pilot on the same
// store, cannot make its result stale.
type RevisionApplier interface {
	ApplyAt(ctx context.Context, head Revision, muts []Mutation) (ApplyResult, error)
}

// HistoryPager is implemented by stores that read one page of an object's
// history without the rest: the events with revision > after, oldest first, at
// most limit of them (1..MaxHistoryPage); more says later ones remain. An
// object with no retained history is ErrNotFound, as History.
type HistoryPager interface {
	HistoryPage(ctx context.Context, key resource.Key, after Revision, limit int) (events []Event, more bool, err error)
}

// MaxHistoryPage bounds one page of history (HistoryPager, the admin API).
const MaxHistoryPage = 1000

// WatchBufferer reports how many committed revisions a watcher may have pending
// before it is cut off with ErrWatchOverflow; the contract suite uses it to exceed it.
type WatchBufferer interface {
	WatchBuffer() int
}

// ValidateMutations checks what every backend must reject before touching storage:
// too many mutations, a nil object, an unknown op or kind, an empty name, a
// namespace that does not fit the kind, a spec of the wrong type, or the same key
// twice. Errors wrap ErrInvalid and name the object.
func ValidateMutations(muts []Mutation) error {
	if len(muts) > MaxMutationsPerApply {
		return fmt.Errorf("%w: apply has %d mutations, limit is %d", ErrInvalid, len(muts), MaxMutationsPerApply)
	}
	seen := make(map[resource.Key]struct{}, len(muts))
	for i, m := range muts {
		if m.Object == nil {
			return fmt.Errorf("%w: mutation[%d]: object is nil", ErrInvalid, i)
		}
		key := m.Object.Key()
		if err := validateKey(key); err != nil {
			return fmt.Errorf("%w: mutation[%d] %s: %s", ErrInvalid, i, key, err)
		}
		switch m.Op {
		case OpPut:
			if err := validateSpec(m.Object); err != nil {
				return fmt.Errorf("%w: %s: %s", ErrInvalid, key, err)
			}
		case OpDelete:
		default:
			return fmt.Errorf("%w: %s: op %q is not PUT or DELETE", ErrInvalid, key, m.Op)
		}
		if m.IfMatch != nil && *m.IfMatch < 0 {
			return fmt.Errorf("%w: %s: If-Match generation %d is negative", ErrInvalid, key, *m.IfMatch)
		}
		if _, dup := seen[key]; dup {
			return fmt.Errorf("%w: %s: appears more than once in one apply", ErrInvalid, key)
		}
		seen[key] = struct{}{}
	}
	return nil
}

func validateKey(k resource.Key) error {
	info, err := resource.LookupKind(k.Kind)
	if err != nil || info.Kind != k.Kind {
		return fmt.Errorf("kind: unknown kind %q", k.Kind)
	}
	if k.Name == "" {
		return errors.New("metadata.name: must not be empty")
	}
	// NUL separates key parts in backends' byte keys; nothing valid contains it.
	if strings.ContainsRune(k.Name, 0) || strings.ContainsRune(k.Namespace, 0) {
		return errors.New("metadata: name and namespace must not contain NUL")
	}
	if info.Namespaced && k.Namespace == "" {
		return errors.New("metadata.namespace: must be set for a namespaced kind")
	}
	if !info.Namespaced && k.Namespace != "" {
		return errors.New("metadata.namespace: must be empty for a cluster-wide kind")
	}
	return nil
}

func validateSpec(o *resource.Object) error {
	info, _ := resource.LookupKind(o.Kind) // checked by validateKey
	want := reflect.TypeOf(info.NewSpec())
	if o.Spec == nil || reflect.TypeOf(o.Spec) != want || reflect.ValueOf(o.Spec).IsNil() {
		return fmt.Errorf("spec: must be a non-nil %s, got %T", want, o.Spec)
	}
	return nil
}
