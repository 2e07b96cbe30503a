package api

import (
	"encoding/json"
	"time"

	"github.com/weft-mesh/weft/pilot/resource"
)

// The JSON bodies the API answers with; meshctl decodes the same types. Objects
// decode with Spec as a generic map on the client side.

// ListResponse answers a list.
type ListResponse struct {
	Revision int64              `json:"revision"`
	Items    []*resource.Object `json:"items"`
}

// ObjectResponse answers a GET or PUT of one object.
type ObjectResponse struct {
	Revision int64            `json:"revision"`
	Changed  bool             `json:"changed,omitempty"`
	Object   *resource.Object `json:"object"`
	Warnings []string         `json:"warnings,omitempty"`
}

// ApplyResponse answers a bulk apply: Items are the objects as stored, in request order.
type ApplyResponse struct {
	Revision int64              `json:"revision"`
	Changed  bool               `json:"changed"`
	Items    []*resource.Object `json:"items"`
	Warnings []string           `json:"warnings,omitempty"`
}

// DeleteResponse answers a DELETE.
type DeleteResponse struct {
	Revision int64  `json:"revision"`
	Deleted  string `json:"deleted"` // Kind/namespace/name
}

// HistoryResponse answers .../history: one entry per change, oldest first.
type HistoryResponse struct {
	Revision int64          `json:"revision"`
	History  []HistoryEntry `json:"history"`
	// Next, when set, is the after= of the next page: history is paged
	// (?limit=, default DefaultHistoryPage, at most store.MaxHistoryPage).
	Next int64 `json:"next,omitempty"`
}

// HistoryEntry is one change of one object.
type HistoryEntry struct {
	Revision   int64            `json:"revision"`
	Op         string           `json:"op"`
	Generation int64            `json:"generation"`
	Time       time.Time        `json:"time"`
	Object     *resource.Object `json:"object,omitempty"`
}

// ErrorResponse answers every 4xx/5xx.
type ErrorResponse struct {
	Revision int64     `json:"revision"`
	Errors   []string  `json:"errors"`
	Warnings []string  `json:"warnings,omitempty"`
	Conflict *Conflict `json:"conflict,omitempty"`
}

// Conflict details a 412: the object whose generation moved.
type Conflict struct {
	Object   string `json:"object"` // Kind/namespace/name
	Expected int64  `json:"expected"`
	Actual   int64  `json:"actual"`
}

// ApplyRequest is the JSON envelope of a bulk apply with per-object If-Match:
// IfMatch maps "Kind/namespace/name" (Kind/name for cluster-wide kinds) to the
// generation that object must have now (0 = must not exist).
type ApplyRequest struct {
	Items   []json.RawMessage `json:"items"`
	IfMatch map[string]int64  `json:"ifMatch,omitempty"`
}

type errorBody = ErrorResponse
