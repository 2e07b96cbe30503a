package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Several pilot replicas on one store each hold the status of the proxies
// connected to them. Any replica's status API answers for all of them by
// asking the others (fan-out) rather than by publishing every proxy's status
// into the store: status changes with every ACK of every proxy, which would be
// a store write each (thousands per push at 10,000 proxies), while status is
// read rarely (an operator, a rollout check) and is freshest where it lives. The
// replicas are found through the store (etcdstore's leased announcements), so a
// killed replica drops out within its lease; one that does not answer within
// PeerTimeout is named in the answer, never silently left out.

// Peer is another replica's admin API.
type Peer struct {
	ID       string `json:"id"`
	AdminURL string `json:"adminURL"`
}

// FanOut configures the status API across replicas.
type FanOut struct {
	Self  string                                    // this replica's id (skipped among Peers)
	Peers func(ctx context.Context) ([]Peer, error) // the live replicas, this one included or not
	// Token is the bearer token the peers' admin APIs require (replicas share
	// --admin-token-file); empty sends none.
	Token   string
	Client  *http.Client  // default: one with PeerTimeout
	Timeout time.Duration // per peer; DefaultPeerTimeout when 0
}

// DefaultPeerTimeout bounds one peer's answer to a fan-out.
const DefaultPeerTimeout = 2 * time.Second

// MaxPeerAnswerBytes bounds one peer's answer (10,000 proxies' status is about
// 20 MB of JSON).
const MaxPeerAnswerBytes = 64 << 20

// ReplicaAnswer says what one replica contributed to a fan-out answer.
type ReplicaAnswer struct {
	ID       string `json:"id"`
	AdminURL string `json:"adminURL,omitempty"`
	Proxies  int    `json:"proxies"`
	Error    string `json:"error,omitempty"`
}

// localParam asks a replica for its own status only (what a fan-out sends).
const localParam = "local"

// FanOutHandler is Handler, answering for every replica unless the request
// has ?local=true: /proxies, /proxies/{node} and /revisions/{rev} merge the
// replicas' answers; the rest is this replica's.
func (t *Tracker) FanOutHandler(f FanOut) http.Handler {
	if f.Timeout == 0 {
		f.Timeout = DefaultPeerTimeout
	}
	if f.Client == nil {
		f.Client = &http.Client{Timeout: f.Timeout}
	}
	local := t.Handler()
	mux := http.NewServeMux()
	mux.Handle("/", local)
	wrap := func(fn func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get(localParam) == "true" {
				local.ServeHTTP(w, r)
				return
			}
			fn(w, r)
		}
	}
	mux.HandleFunc("GET /apis/status/v1/proxies", wrap(func(w http.ResponseWriter, r *http.Request) {
		byReplica, answers := fanOut[struct {
			Proxies []ProxyStatus `json:"proxies"`
		}](r.Context(), f, "/apis/status/v1/proxies")
		all := map[string][]ProxyStatus{f.Self: t.Proxies()}
		for id, a := range byReplica {
			all[id] = a.Proxies
		}
		answers = countProxies(answers, all, f.Self)
		writeJSON(w, http.StatusOK, map[string]any{"proxies": MergeProxies(all), "replicas": answers})
	}))
	mux.HandleFunc("GET /apis/status/v1/proxies/{node}", wrap(func(w http.ResponseWriter, r *http.Request) {
		node := r.PathValue("node")
		all := map[string][]ProxyStatus{}
		if ps, err := t.Proxy(node); err == nil {
			all[f.Self] = []ProxyStatus{ps}
		}
		byReplica, _ := fanOut[ProxyStatus](r.Context(), f, "/apis/status/v1/proxies/"+url.PathEscape(node))
		for id, ps := range byReplica {
			all[id] = []ProxyStatus{ps}
		}
		merged := MergeProxies(all)
		if len(merged) == 0 {
			writeError(w, fmt.Errorf("proxy %q on no replica: %w", node, ErrNotFound))
			return
		}
		writeJSON(w, http.StatusOK, merged[0])
	}))
	mux.HandleFunc("GET /apis/status/v1/proxies/{node}/config_dump", wrap(func(w http.ResponseWriter, r *http.Request) {
		// Only the replica a proxy is connected to (else the one that saw it
		// last) knows what it was sent: answer from there.
		node := r.PathValue("node")
		all := map[string][]ProxyStatus{}
		if ps, err := t.Proxy(node); err == nil {
			all[f.Self] = []ProxyStatus{ps}
		}
		byReplica, answers := fanOut[ProxyStatus](r.Context(), f, "/apis/status/v1/proxies/"+url.PathEscape(node))
		for id, ps := range byReplica {
			all[id] = []ProxyStatus{ps}
		}
		merged := MergeProxies(all)
		if len(merged) == 0 || merged[0].Replica == f.Self {
			local.ServeHTTP(w, r)
			return
		}
		for _, a := range answers {
			if a.ID == merged[0].Replica {
				d, err := getPeer[ConfigDump](r.Context(), f, a.AdminURL+"/apis/status/v1/proxies/"+url.PathEscape(node)+"/config_dump?"+localParam+"=true")
				if err != nil {
					writeJSON(w, http.StatusBadGateway, map[string]string{"error": fmt.Sprintf("config dump of %q from replica %s: %v", node, a.ID, err)})
					return
				}
				writeJSON(w, http.StatusOK, d)
				return
			}
		}
		local.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /apis/status/v1/revisions/{rev}", wrap(func(w http.ResponseWriter, r *http.Request) {
		s := r.PathValue("rev")
		rev, err := strconv.ParseInt(s, 10, 64)
		if s == "latest" {
			rev, err = t.LatestRevision() // every replica follows the same store
			if err != nil {
				writeError(w, err)
				return
			}
		} else if err != nil || rev < 0 {
			local.ServeHTTP(w, r) // its error answer
			return
		}
		byReplica, answers := fanOut[RevisionStatus](r.Context(), f, "/apis/status/v1/revisions/"+strconv.FormatInt(rev, 10))
		own := t.Revision(rev)
		list := []RevisionStatus{own}
		out := []ReplicaAnswer{{ID: f.Self, Proxies: own.Connected}}
		for _, a := range answers {
			if rs, ok := byReplica[a.ID]; ok {
				list = append(list, rs)
				a.Proxies = rs.Connected
			}
			out = append(out, a)
		}
		writeJSON(w, http.StatusOK, struct {
			RevisionStatus
			Replicas []ReplicaAnswer `json:"replicas"`
		}{MergeRevisions(list), out})
	}))
	return mux
}

// fanOut asks every peer but Self for path?local=true at once and returns the
// decoded answers by replica id, and what each replica contributed.
func fanOut[T any](ctx context.Context, f FanOut, path string) (map[string]T, []ReplicaAnswer) {
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	peers, err := f.Peers(ctx)
	if err != nil {
		return nil, []ReplicaAnswer{{ID: "?", Error: "listing replicas: " + err.Error()}}
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		out     = map[string]T{}
		answers []ReplicaAnswer
	)
	for _, p := range peers {
		if p.ID == f.Self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := getPeer[T](ctx, f, p.AdminURL+path+"?"+localParam+"=true")
			mu.Lock()
			defer mu.Unlock()
			a := ReplicaAnswer{ID: p.ID, AdminURL: p.AdminURL, Proxies: -1}
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				a.Error = err.Error()
			default:
				out[p.ID] = v
			}
			answers = append(answers, a)
		}()
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].ID < answers[j].ID })
	return out, answers
}

func getPeer[T any](ctx context.Context, f FanOut, u string) (T, error) {
	var v T
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return v, err
	}
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return v, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return v, fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxPeerAnswerBytes)).Decode(&v); err != nil {
		return v, fmt.Errorf("decoding %s: %w", u, err)
	}
	return v, nil
}

// countProxies fills in how many proxies each replica reported (self first).
func countProxies(answers []ReplicaAnswer, all map[string][]ProxyStatus, self string) []ReplicaAnswer {
	out := []ReplicaAnswer{{ID: self, Proxies: len(all[self])}}
	for _, a := range answers {
		if ps, ok := all[a.ID]; ok {
			a.Proxies = len(ps)
		}
		out = append(out, a)
	}
	return out
}

// MergeProxies merges the replicas' proxy lists into one, sorted by node,
// each with the Replica it came from. A node several replicas report (it
// moved from one to another; the one it left still retains it as
// DISCONNECTED) is taken from the replica it is connected to, else the one that
// saw it last. Pure.
func MergeProxies(byReplica map[string][]ProxyStatus) []ProxyStatus {
	best := map[string]ProxyStatus{}
	ids := make([]string, 0, len(byReplica))
	for id := range byReplica {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic among equals
	for _, id := range ids {
		for _, ps := range byReplica[id] {
			ps.Replica = id
			cur, ok := best[ps.Node]
			if !ok || better(ps, cur) {
				best[ps.Node] = ps
			}
		}
	}
	out := make([]ProxyStatus, 0, len(best))
	for _, ps := range best {
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func better(a, b ProxyStatus) bool {
	if (a.DisconnectedAt == nil) != (b.DisconnectedAt == nil) {
		return a.DisconnectedAt == nil
	}
	return a.LastSeen.After(b.LastSeen)
}

// MergeRevisions adds up one revision's rollout over the replicas (each counts
// the proxies connected to it). Pure.
func MergeRevisions(list []RevisionStatus) RevisionStatus {
	var m RevisionStatus
	for i, rs := range list {
		if i == 0 {
			m.Revision = rs.Revision
		}
		m.Connected += rs.Connected
		m.Effective += rs.Effective
		m.Pending += rs.Pending
		m.Rejected += rs.Rejected
		m.Rejections = append(m.Rejections, rs.Rejections...)
		if rs.WrittenAt != nil && (m.WrittenAt == nil || rs.WrittenAt.Before(*m.WrittenAt)) {
			w := *rs.WrittenAt
			m.WrittenAt = &w
		}
		if rs.LastAckAt != nil && (m.LastAckAt == nil || rs.LastAckAt.After(*m.LastAckAt)) {
			a := *rs.LastAckAt
			m.LastAckAt = &a
		}
	}
	sort.Slice(m.Rejections, func(i, j int) bool {
		a, b := m.Rejections[i], m.Rejections[j]
		return a.Node < b.Node || a.Node == b.Node && a.Type < b.Type
	})
	m.Converged = m.Effective == m.Connected
	if m.Converged && m.WrittenAt != nil && m.LastAckAt != nil {
		d := m.LastAckAt.Sub(*m.WrittenAt).Seconds()
		m.ConvergenceSeconds = &d
	}
	return m
}
