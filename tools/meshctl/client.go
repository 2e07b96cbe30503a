package meshctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/weft-mesh/weft/pilot/api"
)

// maxResponseBytes bounds what meshctl reads from pilot.
const maxResponseBytes = 64 << 20

type client struct {
	base  string
	token string
	http  *http.Client
	tr    *http.Transport
}

func newClient(base, tokenFile string, timeout time.Duration) (*client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fail(ExitOther, "--pilot %q is not an http(s) URL", base)
	}
	if timeout <= 0 {
		return nil, fail(ExitOther, "--timeout %v must be positive", timeout)
	}
	c := &client{base: strings.TrimRight(base, "/")}
	if tokenFile != "" {
		b, err := readFileLimited(tokenFile, 64<<10)
		if err != nil {
			return nil, fail(ExitOther, "reading --token-file: %v", err)
		}
		c.token = strings.TrimSpace(string(b))
		if c.token == "" {
			return nil, fail(ExitOther, "--token-file %s is empty", tokenFile)
		}
	}
	// Own transport so Run leaves no idle connections behind when it returns.
	c.tr = http.DefaultTransport.(*http.Transport).Clone()
	c.http = &http.Client{Transport: c.tr, Timeout: timeout}
	return c, nil
}

func (c *client) close() { c.tr.CloseIdleConnections() }

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request. A transport failure is an ExitOther error.
func (c *client) do(ctx context.Context, method, path string, body []byte, hdr map[string]string) (*reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fail(ExitOther, "building request: %v", err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if reason, ok := dialFailure(err); ok {
			return nil, fail(ExitOther, "pilot not reachable at %s: %s (is pilot running? --pilot)", c.base, reason)
		}
		return nil, fail(ExitOther, "%s %s: %v", method, c.base+path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fail(ExitOther, "%s %s: reading answer: %v", method, c.base+path, err)
	}
	r := &reply{status: resp.StatusCode, header: resp.Header, body: b}
	if r.status/100 != 2 {
		var er struct {
			api.ErrorResponse
			Error string `json:"error"` // the xDS status API's shape
		}
		if jerr := json.Unmarshal(b, &er); jerr == nil && len(er.Errors) == 0 && er.Error != "" {
			er.Errors = []string{er.Error}
		}
		if len(er.Errors) == 0 {
			er.Errors = []string{strings.TrimSpace(string(b))}
			if er.Errors[0] == "" {
				er.Errors = nil
			}
		}
		return r, statusError(r.status, er.Errors)
	}
	return r, nil
}

// dialFailure says, in a few words, why no connection to pilot could be made;
// false when the connection was made and failed later (that error says more
// with the method and path).
func dialFailure(err error) (string, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return "", false
	}
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.As(err, &dnsErr):
		return "cannot resolve " + dnsErr.Name + ": " + dnsErr.Err, true
	case op.Timeout():
		return "connection timed out", true
	}
	return op.Err.Error(), true
}

// decode unmarshals a JSON answer into v.
func (r *reply) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fail(ExitOther, "pilot answered malformed JSON: %v", err)
	}
	return nil
}

func (c *client) getJSON(ctx context.Context, path string, v any) error {
	r, err := c.do(ctx, http.MethodGet, path, nil, map[string]string{"Accept": "application/json"})
	if err != nil {
		return err
	}
	return r.decode(v)
}

// resourcePath builds the REST path of a kind, optionally one object.
func resourcePath(plural string, namespaced bool, ns, name string, allNS bool) string {
	p := api.Prefix
	if namespaced && !allNS {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	p += "/" + plural
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

func readFileLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
