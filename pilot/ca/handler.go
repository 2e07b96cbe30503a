package ca

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/weft-mesh/weft/certs/spiffe"
	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/pilot/api"
)

// Prefix is where pilot mounts Handler on its admin API (behind its
// authorisation: loopback, or --admin-allow-remote with the admin token).
const Prefix = "/apis/ca/v1/"

// MaxRequestBytes bounds a request body of this API.
const MaxRequestBytes = 16 << 10

// The JSON bodies of the admin API; meshctl decodes the same types. Errors
// answer with api.ErrorResponse ({"errors": [...]}).

// TokenRequest is POST tokens. TTL is a Go duration ("1h"); token.DefaultTTL
// when empty, at most token.MaxTTL.
type TokenRequest struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
	TTL            string `json:"ttl,omitempty"`
}

// TokenResponse answers POST tokens.
type TokenResponse struct {
	Token     string    `json:"token"`
	ID        string    `json:"id"`
	SPIFFEID  string    `json:"spiffeId"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Certificate states.
const (
	StateValid   = "VALID"
	StateExpired = "EXPIRED"
	StateRevoked = "REVOKED"
)

// Certificate is one entry of GET certificates.
type Certificate struct {
	Serial    string    `json:"serial"`
	SPIFFEID  string    `json:"spiffeId"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	Issuer    string    `json:"issuer"`
	Node      string    `json:"node,omitempty"`
	State     string    `json:"state"`
}

// CertificatesResponse answers GET certificates.
type CertificatesResponse struct {
	Certificates []Certificate `json:"certificates"`
}

// RevocationRequest is POST revocations: exactly one of Serial (hex) and
// SPIFFEID; Reason an RFC 5280 name (keyCompromise, superseded, ...).
type RevocationRequest struct {
	Serial   string `json:"serial,omitempty"`
	SPIFFEID string `json:"spiffeId,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// RevocationResponse answers POST revocations: the serials now revoked and the
// number of the CRL that lists them (already published when this answers).
type RevocationResponse struct {
	Revoked   []string `json:"revoked"`
	CRLNumber int64    `json:"crlNumber"`
}

// RotationResponse answers GET, POST and DELETE rotation.
type RotationResponse struct {
	Rotating            bool      `json:"rotating"`
	Signer              string    `json:"signer"`
	SignerNotAfter      time.Time `json:"signerNotAfter"`
	Previous            string    `json:"previous,omitempty"`
	OldRootCertificates int       `json:"oldRootCertificates,omitempty"` // unexpired workload certificates from the previous root
	PluggedIn           bool      `json:"pluggedIn,omitempty"`
}

// Handler serves the admin API under Prefix.
func (s *Service) Handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST "+Prefix+"tokens", s.postToken)
	m.HandleFunc("GET "+Prefix+"certificates", s.getCertificates)
	m.HandleFunc("POST "+Prefix+"revocations", s.postRevocation)
	m.HandleFunc("GET "+Prefix+"rotation", s.getRotation)
	m.HandleFunc("POST "+Prefix+"rotation", s.postRotation)
	m.HandleFunc("DELETE "+Prefix+"rotation", s.deleteRotation)
	return m
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}

func writeErr(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, api.ErrorResponse{Errors: []string{fmt.Sprintf(format, args...)}})
}

// decode reads one JSON object of at most MaxRequestBytes with no unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, "request body over the bound of %d bytes", MaxRequestBytes)
			return false
		}
		writeErr(w, http.StatusBadRequest, "request body: %v", err)
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeErr(w, http.StatusBadRequest, "request body: data after the JSON object")
		return false
	}
	return true
}

func (s *Service) postToken(w http.ResponseWriter, r *http.Request) {
	var req TokenRequest
	if !decode(w, r, &req) {
		return
	}
	var errs []string
	if err := spiffe.ValidName(req.Namespace); err != nil {
		errs = append(errs, "namespace: "+err.Error())
	}
	if err := spiffe.ValidName(req.ServiceAccount); err != nil {
		errs = append(errs, "serviceAccount: "+err.Error())
	}
	ttl := token.DefaultTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("ttl: %q is not a duration", req.TTL))
		case d <= 0:
			errs = append(errs, fmt.Sprintf("ttl: %v is not positive", d))
		case d > token.MaxTTL:
			errs = append(errs, fmt.Sprintf("ttl: %v is over the bound of %v", d, token.MaxTTL))
		default:
			ttl = d
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, api.ErrorResponse{Errors: errs})
		return
	}
	tok, c, err := s.IssueToken(req.Namespace, req.ServiceAccount, ttl)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "%v", err)
		return
	}
	id, _ := spiffe.Workload(s.td.String(), c.Namespace, c.ServiceAccount)
	writeJSON(w, http.StatusCreated, TokenResponse{Token: tok, ID: c.ID, SPIFFEID: id.String(), ExpiresAt: c.Expiry})
}

func (s *Service) getCertificates(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, CertificatesResponse{Certificates: s.Certificates()})
}

func (s *Service) postRevocation(w http.ResponseWriter, r *http.Request) {
	var req RevocationRequest
	if !decode(w, r, &req) {
		return
	}
	revs, number, err := s.Revoke(req.Serial, req.SPIFFEID, req.Reason)
	switch {
	case errors.Is(err, errInvalid):
		writeErr(w, http.StatusBadRequest, "revocation: %v", err)
		return
	case errors.Is(err, ErrTooManyRevocations):
		writeErr(w, http.StatusInsufficientStorage, "revocation: %v", err)
		return
	case err != nil:
		writeErr(w, http.StatusInternalServerError, "revocation: %v", err)
		return
	}
	out := RevocationResponse{Revoked: []string{}, CRLNumber: number}
	for _, v := range revs {
		out.Revoked = append(out.Revoked, serialKey(v.Serial))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) getRotation(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.RotationStatus())
}

func (s *Service) postRotation(w http.ResponseWriter, r *http.Request) {
	if err := s.StartRotation(); err != nil {
		writeErr(w, http.StatusConflict, "start rotation: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.RotationStatus())
}

func (s *Service) deleteRotation(w http.ResponseWriter, r *http.Request) {
	force := false
	switch v := r.URL.Query().Get("force"); v {
	case "", "false":
	case "true":
		force = true
	default:
		writeErr(w, http.StatusBadRequest, "force: %q, want true or false", v)
		return
	}
	if err := s.FinishRotation(force); err != nil {
		writeErr(w, http.StatusConflict, "finish rotation: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.RotationStatus())
}
