package ca

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Files the service keeps in <data-dir>/ca/ beside certs/ca's root files.
const (
	TokenKeyFile    = "token-key.pem"    // Ed25519 key bootstrap tokens are signed with (0600)
	IssuedFile      = "issued.json"      // the issued registry (written coalesced, at most every FlushInterval)
	RevocationsFile = "revocations.json" // revocations and the CRL number (written before an answer says revoked)
)

// MaxStateFileBytes bounds what New reads from either state file.
const MaxStateFileBytes = 64 << 20

type issuedJSON struct {
	Serial    string    `json:"serial"`
	ID        string    `json:"spiffeId"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	Issuer    string    `json:"issuer"`
	Node      string    `json:"node,omitempty"`
	Internal  bool      `json:"internal,omitempty"`
}

type revocationJSON struct {
	Serial    string    `json:"serial"`
	ID        string    `json:"spiffeId,omitempty"`
	RevokedAt time.Time `json:"revokedAt"`
	Reason    int       `json:"reason"`
	NotAfter  time.Time `json:"notAfter"`
}

type idRevocationJSON struct {
	ID        string    `json:"spiffeId"`
	RevokedAt time.Time `json:"revokedAt"`
}

type revocationsJSON struct {
	CRLNumber int64              `json:"crlNumber"`
	Serials   []revocationJSON   `json:"serials"`
	IDs       []idRevocationJSON `json:"spiffeIds"`
}

func encodeIssued(entries []*Issued) ([]byte, error) {
	out := make([]issuedJSON, len(entries))
	for i, e := range entries {
		out[i] = issuedJSON{Serial: serialKey(e.Serial), ID: e.ID.String(), NotBefore: e.NotBefore, NotAfter: e.NotAfter, Issuer: e.Issuer, Node: e.Node, Internal: e.Internal}
	}
	return json.Marshal(out)
}

func encodeRevocations(number int64, revs []Revocation, ids map[spiffeid.ID]time.Time) ([]byte, error) {
	out := revocationsJSON{CRLNumber: number, Serials: make([]revocationJSON, len(revs))}
	for i, v := range revs {
		out.Serials[i] = revocationJSON{Serial: serialKey(v.Serial), ID: v.ID, RevokedAt: v.RevokedAt, Reason: v.Reason, NotAfter: v.NotAfter}
	}
	for id, at := range ids {
		out.IDs = append(out.IDs, idRevocationJSON{ID: id.String(), RevokedAt: at})
	}
	return json.Marshal(out)
}

func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxStateFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the bound of %d", path, st.Size(), MaxStateFileBytes)
	}
	return os.ReadFile(path)
}

// load reads both state files into r (missing files are an empty state) and
// returns the last CRL number.
func (r *registry) load(dir string) (int64, error) {
	var number int64
	if b, err := readBounded(filepath.Join(dir, IssuedFile)); err == nil {
		var in []issuedJSON
		if err := json.Unmarshal(b, &in); err != nil {
			return 0, fmt.Errorf("%s: %w", IssuedFile, err)
		}
		for i, e := range in {
			s, err := ParseSerial(e.Serial)
			if err != nil {
				return 0, fmt.Errorf("%s: entry %d: %w", IssuedFile, i, err)
			}
			id, err := spiffeid.FromString(e.ID)
			if err != nil {
				return 0, fmt.Errorf("%s: entry %d (serial %s): %w", IssuedFile, i, e.Serial, err)
			}
			r.issued[serialKey(s)] = &Issued{Serial: s, ID: id, NotBefore: e.NotBefore, NotAfter: e.NotAfter, Issuer: e.Issuer, Node: e.Node, Internal: e.Internal}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if b, err := readBounded(filepath.Join(dir, RevocationsFile)); err == nil {
		var in revocationsJSON
		if err := json.Unmarshal(b, &in); err != nil {
			return 0, fmt.Errorf("%s: %w", RevocationsFile, err)
		}
		number = in.CRLNumber
		for i, v := range in.Serials {
			s, err := ParseSerial(v.Serial)
			if err != nil {
				return 0, fmt.Errorf("%s: serial %d: %w", RevocationsFile, i, err)
			}
			r.revoked[serialKey(s)] = Revocation{Serial: s, ID: v.ID, RevokedAt: v.RevokedAt, Reason: v.Reason, NotAfter: v.NotAfter}
		}
		for i, v := range in.IDs {
			id, err := spiffeid.FromString(v.ID)
			if err != nil {
				return 0, fmt.Errorf("%s: spiffeIds %d: %w", RevocationsFile, i, err)
			}
			r.ids[id] = v.RevokedAt
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	return number, nil
}
