package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
	"github.com/weft-mesh/weft/pilot/vip"
)

// kindFor resolves the {plural} (and {ns}) path values. namespaced says whether
// the path had a namespaces/{ns} part.
func kindFor(r *http.Request) (resource.KindInfo, string, error) {
	plural := r.PathValue("plural")
	ki, err := resource.LookupKind(plural)
	if err != nil || ki.Plural != plural {
		return resource.KindInfo{}, "", fmt.Errorf("%w: unknown resource %q", store.ErrNotFound, plural)
	}
	ns := r.PathValue("ns")
	inNS := strings.Contains(r.Pattern, "/namespaces/{ns}/")
	switch {
	case ki.Namespaced && !inNS && r.PathValue("name") != "":
		return ki, "", fmt.Errorf("%w: %s is namespaced: use %s/namespaces/{namespace}/%s/{name}", store.ErrNotFound, ki.Kind, Prefix, ki.Plural)
	case !ki.Namespaced && inNS:
		return ki, "", fmt.Errorf("%w: %s is cluster-wide: use %s/%s/{name}", store.ErrNotFound, ki.Kind, Prefix, ki.Plural)
	}
	return ki, ns, nil
}

func keyFor(r *http.Request) (resource.Key, error) {
	ki, ns, err := kindFor(r)
	if err != nil {
		return resource.Key{}, err
	}
	return resource.Key{Kind: ki.Kind, Namespace: ns, Name: r.PathValue("name")}, nil
}

func wantsYAML(r *http.Request) bool {
	if o := r.URL.Query().Get("output"); o != "" {
		return o == "yaml"
	}
	return strings.Contains(r.Header.Get("Accept"), "yaml")
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	ki, ns, err := kindFor(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	objs, rev, err := a.store.List(r.Context(), ki.Kind, ns)
	if err != nil {
		a.fail(w, r, fmt.Errorf("listing %s: %w", ki.Plural, err))
		return
	}
	if objs == nil {
		objs = []*resource.Object{}
	}
	a.answer(w, r, http.StatusOK, int64(rev), objs, ListResponse{Revision: int64(rev), Items: objs})
}

// keyAndRevision resolves the object path and reads the store revision before the
// object is read (callers raise it to the object's if that is newer). On error it
// has already answered.
func (a *API) keyAndRevision(w http.ResponseWriter, r *http.Request) (resource.Key, store.Revision, bool) {
	key, err := keyFor(r)
	if err != nil {
		a.fail(w, r, err)
		return key, 0, false
	}
	rev, err := a.store.Revision(r.Context())
	if err != nil {
		a.fail(w, r, fmt.Errorf("reading store revision: %w", err))
		return key, 0, false
	}
	return key, rev, true
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	key, rev, ok := a.keyAndRevision(w, r)
	if !ok {
		return
	}
	o, err := a.store.Get(r.Context(), key)
	if err != nil {
		a.fail(w, r, err) // the store names the key
		return
	}
	// The revision read before Get can only be older than the object's; report
	// the newer one so the answer never claims a revision older than its content.
	rev = max(rev, store.Revision(o.Metadata.Revision))
	a.answer(w, r, http.StatusOK, int64(rev), []*resource.Object{o}, ObjectResponse{Revision: int64(rev), Object: o})
}

func (a *API) history(w http.ResponseWriter, r *http.Request) {
	if sub := r.PathValue("sub"); sub != "" && sub != "history" {
		a.fail(w, r, fmt.Errorf("%w: no such path %s", store.ErrNotFound, r.URL.Path))
		return
	}
	key, rev, ok := a.keyAndRevision(w, r)
	if !ok {
		return
	}
	after, limit, err := historyPage(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	evs, more, err := readHistory(r.Context(), a.store, key, after, limit)
	if err != nil {
		a.fail(w, r, err) // the store names the key
		return
	}
	resp := HistoryResponse{History: make([]HistoryEntry, 0, len(evs))}
	if more && len(evs) > 0 {
		resp.Next = int64(evs[len(evs)-1].Revision)
	}
	for _, ev := range evs {
		e := HistoryEntry{Revision: int64(ev.Revision), Op: string(ev.Op), Time: ev.Time.UTC(), Object: ev.Object}
		if ev.Object != nil {
			e.Generation = ev.Object.Metadata.Generation
		}
		rev = max(rev, ev.Revision)
		resp.History = append(resp.History, e)
	}
	resp.Revision = int64(rev)
	a.answer(w, r, http.StatusOK, int64(rev), nil, resp)
}

func (a *API) put(w http.ResponseWriter, r *http.Request) {
	key, err := keyFor(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		a.fail(w, r, fmt.Errorf("reading request body: %w", err))
		return
	}
	gen, hasIfMatch, err := parseIfMatch(r.Header.Get("If-Match"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	objs, env, err := decodeObjects(body, "request body")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(objs) != 1 || env != nil {
		a.fail(w, r, badRequest("PUT %s: body must hold exactly one object, got %d (use %s/apply for several)", key, len(objs), Prefix))
		return
	}
	if got := objs[0].Key(); got != key {
		a.fail(w, r, badRequest("PUT %s: body is %s; the path and the body's kind, namespace and name must match", key, got))
		return
	}
	m := store.Mutation{Op: store.OpPut, Object: objs[0]}
	if hasIfMatch {
		m.IfMatch = &gen
	}
	res, warns, err := a.write(r.Context(), []store.Mutation{m})
	if err != nil {
		a.failWarn(w, r, err, warns)
		return
	}
	setWarnings(w, warns)
	a.answer(w, r, http.StatusOK, int64(res.Revision), res.Objects,
		ObjectResponse{Revision: int64(res.Revision), Changed: res.Changed, Object: res.Objects[0], Warnings: warns})
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	key, err := keyFor(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	gen, hasIfMatch, err := parseIfMatch(r.Header.Get("If-Match"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	m := store.Mutation{Op: store.OpDelete, Object: &resource.Object{
		APIVersion: resource.APIVersion, Kind: key.Kind,
		Metadata: resource.Metadata{Namespace: key.Namespace, Name: key.Name},
	}}
	if hasIfMatch {
		m.IfMatch = &gen
	}
	res, warns, err := a.write(r.Context(), []store.Mutation{m})
	if err != nil {
		a.failWarn(w, r, err, warns)
		return
	}
	setWarnings(w, warns)
	a.answer(w, r, http.StatusOK, int64(res.Revision), nil, DeleteResponse{Revision: int64(res.Revision), Deleted: key.String()})
}

func (a *API) apply(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		a.fail(w, r, fmt.Errorf("reading request body: %w", err))
		return
	}
	muts, err := applyMutations(body, r.Header.Get("If-Match"), a.maxObjects)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, warns, err := a.write(r.Context(), muts)
	if err != nil {
		a.failWarn(w, r, err, warns)
		return
	}
	setWarnings(w, warns)
	a.answer(w, r, http.StatusOK, int64(res.Revision), nil,
		ApplyResponse{Revision: int64(res.Revision), Changed: res.Changed, Items: res.Objects, Warnings: warns})
}

// write runs the cross-object checks over the objects that will exist after muts
// and commits muts as one revision. ValidateSet errors block the write; its
// warnings are returned either way.
//
// Services get their VIPs here (pilot/vip.Assign: the stored ones kept, else
// the lowest free address of the range). When muts put a Service, the commit
// is conditional on the store revision the objects were read at
// (store.RevisionApplier), so a write by another pilot on the same store in
// between cannot make two Services take one address: the apply is planned
// again, at most MaxApplyAttempts times.
func (a *API) write(ctx context.Context, muts []store.Mutation) (store.ApplyResult, []string, error) {
	start := time.Now()
	outcome := "error"
	defer func() { a.metrics.applyDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds()) }()

	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	ra, atHead := a.store.(store.RevisionApplier)
	atHead = atHead && putsService(muts)
	for attempt := 1; ; attempt++ {
		res, warns, err := a.writeOnce(ctx, muts, ra, atHead, &outcome)
		var rc *store.RevisionConflictError
		if !errors.As(err, &rc) {
			return res, warns, err
		}
		if attempt == MaxApplyAttempts {
			return store.ApplyResult{}, warns, fmt.Errorf("the store moved under %d attempts at this apply (other writers on it): %w", attempt, err)
		}
		a.log.Debug("store moved under an apply; planning it again", "attempt", attempt, "error", err)
	}
}

// MaxApplyAttempts bounds how often one apply is planned again because the
// store revision moved between reading it and committing (write).
const MaxApplyAttempts = 5

func putsService(muts []store.Mutation) bool {
	for _, m := range muts {
		if m.Op == store.OpPut && m.Object.Kind == resource.KindService {
			return true
		}
	}
	return false
}

// writeOnce is one attempt of write: read, assign VIPs, check, commit.
func (a *API) writeOnce(ctx context.Context, muts []store.Mutation, ra store.RevisionApplier, atHead bool, outcome *string) (store.ApplyResult, []string, error) {
	current, rev, err := a.store.List(ctx, "", "")
	if err != nil {
		return store.ApplyResult{}, nil, fmt.Errorf("listing objects for cross-object checks: %w", err)
	}
	muts, err = vip.Assign(current, muts)
	if err != nil {
		*outcome = "invalid"
		return store.ApplyResult{}, nil, err
	}
	after := make(map[resource.Key]*resource.Object, len(current)+len(muts))
	for _, o := range current {
		after[o.Key()] = o
	}
	applied := make(map[string]bool, len(muts))
	for _, m := range muts {
		applied[m.Object.Key().String()] = true
		if m.Op == store.OpDelete {
			delete(after, m.Object.Key())
		} else {
			after[m.Object.Key()] = m.Object
		}
	}
	errs, warns := resource.ValidateSet(slices.Collect(maps.Values(after)))
	warns = relevantWarnings(current, applied, warns)
	if a.plaintext {
		warns = append(warns, plaintextWarnings(muts)...)
	}
	if len(errs) > 0 {
		*outcome = "invalid"
		return store.ApplyResult{}, warns, errs
	}
	var res store.ApplyResult
	if atHead {
		res, err = ra.ApplyAt(ctx, rev, muts)
	} else {
		res, err = a.store.Apply(ctx, muts)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) { // an If-Match or the revision moved
			*outcome = "conflict"
		}
		return store.ApplyResult{}, warns, err
	}
	*outcome = "ok"
	a.log.Info("applied", "revision", res.Revision, "objects", len(muts), "changed", res.Changed, "warnings", len(warns))
	return res, warns, nil
}

// answer writes a success: YAML (resource.Encode of objs) when asked and objs is
// non-nil, JSON of body otherwise.
func (a *API) answer(w http.ResponseWriter, r *http.Request, code int, rev int64, objs []*resource.Object, body any) {
	w.Header().Set(RevisionHeader, strconv.FormatInt(rev, 10))
	if objs != nil && wantsYAML(r) {
		out, err := resource.Encode(objs, "yaml")
		if err != nil {
			a.fail(w, r, fmt.Errorf("encoding YAML: %w", err))
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.WriteHeader(code)
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := writeJSONBody(w, body); err != nil {
		a.log.Debug("writing response", "path", r.URL.Path, "error", err)
	}
}

func writeJSONBody(w io.Writer, body any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(body)
}

func setWarnings(w http.ResponseWriter, warns []string) {
	for _, s := range warns {
		// RFC 9111 warn-code 299 "miscellaneous persistent warning", as Kubernetes does.
		w.Header().Add("Warning", `299 - `+strconv.Quote(s))
	}
}

func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) { a.failWarn(w, r, err, nil) }

// failWarn maps err to a status and writes an ErrorResponse with every error line.
func (a *API) failWarn(w http.ResponseWriter, r *http.Request, err error, warns []string) {
	code, body := classify(err)
	body.Warnings = warns
	if code >= 500 {
		a.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	// Best effort: the request's own context may be the reason we failed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
	defer cancel()
	if rev, rerr := a.store.Revision(ctx); rerr == nil {
		body.Revision = int64(rev)
		w.Header().Set(RevisionHeader, strconv.FormatInt(int64(rev), 10))
	}
	setWarnings(w, warns)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = writeJSONBody(w, body)
}

func classify(err error) (int, ErrorResponse) {
	var (
		ce  *store.ConflictError
		el  resource.ErrorList
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, ErrorResponse{Errors: []string{fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}}
	case errors.As(err, &ce):
		return http.StatusPreconditionFailed, ErrorResponse{
			Errors:   []string{ce.Error()},
			Conflict: &Conflict{Object: ce.Key.String(), Expected: ce.Expected, Actual: ce.Actual},
		}
	case errors.As(err, new(*store.RevisionConflictError)):
		return http.StatusConflict, ErrorResponse{Errors: []string{err.Error()}}
	case errors.As(err, &el):
		lines := make([]string, 0, len(el))
		for _, e := range el {
			lines = append(lines, e.Error())
		}
		return http.StatusBadRequest, ErrorResponse{Errors: lines}
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest, ErrorResponse{Errors: []string{strings.TrimPrefix(err.Error(), errBadRequest.Error()+": ")}}
	case errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest, ErrorResponse{Errors: []string{err.Error()}}
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, ErrorResponse{Errors: []string{err.Error()}}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable, ErrorResponse{Errors: []string{err.Error()}}
	default:
		return http.StatusInternalServerError, ErrorResponse{Errors: []string{err.Error()}}
	}
}

// relevantWarnings keeps the warnings this write is answerable for: those about
// the objects it writes, and those it newly causes elsewhere (deleting a Service
// a Route names). Warnings that existed before the write are not repeated.
func relevantWarnings(before []*resource.Object, applied map[string]bool, warns []string) []string {
	var old map[string]bool
	out := warns[:0:0]
	for _, w := range warns {
		if key, _, ok := strings.Cut(w, ": "); ok && applied[key] {
			out = append(out, w)
			continue
		}
		if old == nil {
			_, prev := resource.ValidateSet(before)
			old = make(map[string]bool, len(prev))
			for _, p := range prev {
				old[p] = true
			}
		}
		if !old[w] {
			out = append(out, w)
		}
	}
	return out
}

// DefaultHistoryPage is a history page's length when ?limit= is not given.
const DefaultHistoryPage = 100

// historyPage reads ?after=REV (0: from the start) and ?limit=N
// (1..store.MaxHistoryPage, default DefaultHistoryPage).
func historyPage(r *http.Request) (store.Revision, int, error) {
	q := r.URL.Query()
	var after int64
	limit := DefaultHistoryPage
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, badRequest("after=%q: not a revision (a number >= 0)", v)
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxHistoryPage {
			return 0, 0, badRequest("limit=%q: want 1..%d", v, store.MaxHistoryPage)
		}
		limit = n
	}
	return store.Revision(after), limit, nil
}

// readHistory reads one page: by the store's pager when it has one, else
// from its whole history.
func readHistory(ctx context.Context, st store.Store, key resource.Key, after store.Revision, limit int) ([]store.Event, bool, error) {
	if p, ok := st.(store.HistoryPager); ok {
		return p.HistoryPage(ctx, key, after, limit)
	}
	evs, err := st.History(ctx, key)
	if err != nil {
		return nil, false, err
	}
	i := 0
	for i < len(evs) && evs[i].Revision <= after {
		i++
	}
	evs = evs[i:]
	if len(evs) > limit {
		return evs[:limit], true, nil
	}
	return evs, false, nil
}

// AllocateStored gives every stored Service that has no VIP (stored before
// pilot allocated them, or while its range was full) one, as an apply of it
// unchanged would: in batches of at most store.MaxMutationsPerApply, each
// guarded by the Services' generations (a Service changed meanwhile is left
// for its own apply). Pilot calls it once at start. It returns how many got
// one; a full range is an error naming the Services left without.
func (a *API) AllocateStored(ctx context.Context) (int, error) {
	objs, _, err := a.store.List(ctx, resource.KindService, "")
	if err != nil {
		return 0, fmt.Errorf("listing Services: %w", err)
	}
	var muts []store.Mutation
	for _, o := range objs {
		if _, addrs := resource.ServiceAddresses(o); len(addrs) > 0 {
			continue
		}
		gen := o.Metadata.Generation
		muts = append(muts, store.Mutation{Op: store.OpPut, Object: o, IfMatch: &gen})
	}
	done := 0
	for len(muts) > 0 {
		n := min(len(muts), store.MaxMutationsPerApply)
		if _, _, err := a.write(ctx, muts[:n]); err != nil {
			return done, fmt.Errorf("allocating VIPs of %d stored Services: %w", n, err)
		}
		done += n
		muts = muts[n:]
	}
	return done, nil
}
