package meshctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/weft-mesh/weft/certs/token"
	"github.com/weft-mesh/weft/pilot/ca"
)

// The mesh CA's commands, against pilot's /apis/ca/v1/.

const (
	tokenUse  = "token create --namespace NS --service-account SA [--ttl D]"
	certUse   = "cert list [-o json] | cert revoke --serial S | --spiffe-id ID [--reason R]"
	rotateUse = "ca rotate start|finish [--force] | ca rotate status"
)

func (e *env) tokenCmd(ctx context.Context, args []string) error {
	if len(args) > 0 && isHelpFlag(args[0]) {
		args = []string{"create", args[0]}
	}
	if len(args) == 0 || args[0] != "create" {
		return fail(ExitOther, "usage: meshctl %s", tokenUse)
	}
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	ns := fs.String("namespace", "", "namespace of the workload (required)")
	sa := fs.String("service-account", "", "service account of the workload (required)")
	ttl := fs.Duration("ttl", token.DefaultTTL, fmt.Sprintf("how long the token may be used for a first CSR (at most %s)", token.MaxTTL))
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 || *ns == "" || *sa == "" {
		return fail(ExitOther, "usage: meshctl %s", tokenUse)
	}
	if *ttl <= 0 || *ttl > token.MaxTTL {
		return fail(ExitInvalid, "--ttl %v: want more than 0 and at most %v", *ttl, token.MaxTTL)
	}
	var out ca.TokenResponse
	if err := e.client.postJSON(ctx, http.MethodPost, ca.Prefix+"tokens", ca.TokenRequest{Namespace: *ns, ServiceAccount: *sa, TTL: ttl.String()}, &out); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, out.Token)
	fmt.Fprintf(e.stderr, "token %s for %s, expires %s\n", out.ID, out.SPIFFEID, out.ExpiresAt.UTC().Format(time.RFC3339))
	return nil
}

func (e *env) certCmd(ctx context.Context, args []string) error {
	if len(args) > 0 && isHelpFlag(args[0]) {
		return &cliError{code: ExitOK, help: commandHelp("cert list", nil) + "\n" + commandHelp("cert revoke", nil)}
	}
	if len(args) == 0 {
		return fail(ExitOther, "usage: meshctl %s", certUse)
	}
	switch args[0] {
	case "list":
		return e.certList(ctx, args[1:])
	case "revoke":
		return e.certRevoke(ctx, args[1:])
	}
	return fail(ExitOther, "usage: meshctl %s", certUse)
}

func (e *env) certList(ctx context.Context, args []string) error {
	asJSON, err := listArgs(flag.NewFlagSet("cert list", flag.ContinueOnError), args, "meshctl cert list [-o json]")
	if err != nil {
		return err
	}
	var v ca.CertificatesResponse
	if err := e.client.getJSON(ctx, ca.Prefix+"certificates", &v); err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(v)
	}
	return e.printTable("SERIAL\tSPIFFE-ID\tNOT-AFTER\tSTATE", func(w io.Writer) {
		for _, c := range v.Certificates {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Serial, c.SPIFFEID, c.NotAfter.UTC().Format(time.RFC3339), c.State)
		}
	})
}

func (e *env) certRevoke(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cert revoke", flag.ContinueOnError)
	serial := fs.String("serial", "", "serial number (hex, as cert list shows it) of the certificate to revoke")
	id := fs.String("spiffe-id", "", "revoke every certificate of this SPIFFE ID, and refuse tokens and certificates for it issued before now")
	reason := fs.String("reason", "", "RFC 5280 reason: keyCompromise, superseded, cessationOfOperation, affiliationChanged, privilegeWithdrawn, cACompromise, aACompromise, unspecified")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || (*serial == "") == (*id == "") {
		return fail(ExitOther, "usage: meshctl cert revoke --serial S | --spiffe-id ID [--reason R]")
	}
	var out ca.RevocationResponse
	if err := e.client.postJSON(ctx, http.MethodPost, ca.Prefix+"revocations", ca.RevocationRequest{Serial: *serial, SPIFFEID: *id, Reason: *reason}, &out); err != nil {
		return err
	}
	for _, s := range out.Revoked {
		fmt.Fprintln(e.stdout, s)
	}
	fmt.Fprintf(e.stderr, "%d certificate(s) revoked; published in CRL number %d\n", len(out.Revoked), out.CRLNumber)
	return nil
}

func (e *env) caCmd(ctx context.Context, args []string) error {
	if len(args) > 0 && isHelpFlag(args[0]) {
		args = []string{"rotate", args[0]}
	}
	if len(args) == 0 || args[0] != "rotate" {
		return fail(ExitOther, "usage: meshctl %s", rotateUse)
	}
	fs := flag.NewFlagSet("ca rotate", flag.ContinueOnError)
	force := fs.Bool("force", false, "finish: drop the old root even while unexpired certificates it signed exist (they stop verifying)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fail(ExitOther, "usage: meshctl %s", rotateUse)
	}
	var out ca.RotationResponse
	switch pos[0] {
	case "start":
		err = e.client.postJSON(ctx, http.MethodPost, ca.Prefix+"rotation", nil, &out)
	case "finish":
		path := ca.Prefix + "rotation"
		if *force {
			path += "?force=true"
		}
		err = e.client.postJSON(ctx, http.MethodDelete, path, nil, &out)
	case "status":
		err = e.client.getJSON(ctx, ca.Prefix+"rotation", &out)
	default:
		return fail(ExitOther, "usage: meshctl %s", rotateUse)
	}
	if err != nil {
		return err
	}
	if out.Rotating {
		fmt.Fprintf(e.stdout, "rotating: new root %s signs; old root %s still trusted (%d unexpired certificates from it)\n", out.Signer, out.Previous, out.OldRootCertificates)
	} else {
		fmt.Fprintf(e.stdout, "not rotating: root %s signs (valid until %s)\n", out.Signer, out.SignerNotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// postJSON sends body (nil: none) as JSON with method and decodes the answer.
func (c *client) postJSON(ctx context.Context, method, path string, body, v any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fail(ExitOther, "encoding request: %v", err)
		}
	} else {
		b = []byte{}
	}
	r, err := c.do(ctx, method, path, bytes.Clone(b), map[string]string{"Content-Type": "application/json", "Accept": "application/json"})
	if err != nil {
		return err
	}
	return r.decode(v)
}
