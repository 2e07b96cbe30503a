package status

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"

	// Register the Envoy types pilot sends so config_dump can render them.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	// And Weft's own types.
	_ "github.com/weft-mesh/weft/bootstrap/stalenesspb"
	_ "github.com/weft-mesh/weft/certs/manifest/manifestpb"
)

// Handler serves the status API:
//
//	GET /apis/status/v1/proxies
//	GET /apis/status/v1/proxies/{node}
//	GET /apis/status/v1/proxies/{node}/config_dump
//	GET /apis/status/v1/revisions/{rev}   ({rev} may be "latest")
//	GET /apis/status/v1/outliers          (outlieragg.View)
func (t *Tracker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis/status/v1/outliers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, t.Outliers(t.cfg.Clock()))
	})
	mux.HandleFunc("GET /apis/status/v1/proxies", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"proxies": t.Proxies()})
	})
	mux.HandleFunc("GET /apis/status/v1/proxies/{node}", func(w http.ResponseWriter, r *http.Request) {
		ps, err := t.Proxy(r.PathValue("node"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ps)
	})
	mux.HandleFunc("GET /apis/status/v1/proxies/{node}/config_dump", func(w http.ResponseWriter, r *http.Request) {
		c, err := t.conn(r.PathValue("node"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, c.ConfigDump())
	})
	mux.HandleFunc("GET /apis/status/v1/revisions/{rev}", func(w http.ResponseWriter, r *http.Request) {
		s := r.PathValue("rev")
		var rev int64
		var err error
		if s == "latest" {
			rev, err = t.LatestRevision()
		} else if rev, err = strconv.ParseInt(s, 10, 64); err != nil || rev < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "revision " + strconv.Quote(s) + ": want a non-negative integer or \"latest\""})
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, t.Revision(rev))
	})
	return mux
}

// ConfigDump is what pilot last sent one proxy.
type ConfigDump struct {
	Node  string           `json:"node"`
	Types []TypeConfigDump `json:"types"`
}

// TypeConfigDump is one type's resources as protojson.
type TypeConfigDump struct {
	Type      string            `json:"type"`
	Version   string            `json:"version,omitempty"`
	Revision  int64             `json:"revision"`
	Resources []json.RawMessage `json:"resources"`
}

// ConfigDump renders the resources the proxy holds as far as pilot knows (the
// latest ones sent, including any it rejected).
func (c *Conn) ConfigDump() ConfigDump {
	c.mu.Lock()
	d := ConfigDump{Node: c.id}
	type item struct {
		typ string
		rec typeRec
	}
	var items []item
	for _, typ := range orderedTypes(c.types) {
		items = append(items, item{typ, *c.types[typ]})
	}
	c.mu.Unlock()
	// Marshal outside the lock: snapshots are immutable.
	for _, it := range items {
		td := TypeConfigDump{Type: TypeName(it.typ), Version: it.rec.versionSent, Revision: it.rec.revisionSent, Resources: []json.RawMessage{}}
		if s := it.rec.sent; s != nil {
			for _, n := range s.Names(it.typ) {
				if _, ok := it.rec.only[n]; it.rec.only != nil && !ok {
					continue
				}
				res := s.Resources[it.typ][n]
				b, err := protojson.Marshal(res.Any)
				if err != nil {
					b, _ = json.Marshal(map[string]string{"name": n, "error": err.Error()})
				}
				td.Resources = append(td.Resources, b)
			}
		}
		d.Types = append(d.Types, td)
	}
	return d
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, ErrNotFound) {
		code = http.StatusNotFound
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing useful to do
}
