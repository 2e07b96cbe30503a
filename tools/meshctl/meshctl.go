// Package meshctl is Weft's command-line client for pilot's admin API. Run holds
// the whole program so tests drive it in-process; cmd/meshctl only calls Run.
//
// Exit codes: 0 success, 1 invalid input (bad resources, bad arguments' values),
// 3 If-Match conflict, 4 not found, 2 anything else (usage, network, server).
package meshctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weft-mesh/weft/internal/version"
	"github.com/weft-mesh/weft/pilot/resource"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitInvalid  = 1
	ExitOther    = 2
	ExitConflict = 3
	ExitNotFound = 4
)

// DefaultPilot is pilot's default admin address.
const DefaultPilot = "http://127.0.0.1:15014"

// DefaultTimeout bounds one request to pilot.
const DefaultTimeout = 60 * time.Second

// commandDocs are the commands in the order help lists them: the synopsis and
// what the command does. A command's -h/--help prints its entry and its flags.
var commandDocs = []struct{ name, use, about string }{
	{"apply", "apply -f PATH [--if-match GEN]", "apply a file or directory as one revision"},
	{"get", "get KIND [NAME] [-n NS] [-A] [-o yaml|json]", "list a kind (a table), or show one object"},
	{"delete", "delete KIND NAME [-n NS] [--if-match GEN]", "delete one object as one revision"},
	{"history", "history KIND NAME [-n NS]", "one line per revision: REVISION  OP  GENERATION  TIME"},
	{"validate", "validate -f PATH", "validate offline, one line per error"},
	{"inject", injectUse, "add the sidecar to the Pods, Deployments, StatefulSets,\nDaemonSets and Jobs of a Kubernetes YAML file, offline,\nas pilot's injection webhook does; YAML on stdout"},
	{"proxy-status", "proxy-status", "one row per proxy: each xDS type SYNCED, PENDING_ACK,\n" +
		"NACKED, NOT_SENT or DISCONNECTED; effective revision"},
	{"rollout status", "rollout status [REV] [--wait] [--timeout D]", "how far store revision REV (default: current) has\n" +
		"rolled out; exit 0 effective on every connected proxy,\n1 a proxy rejected it, 2 not yet / timed out"},
	{"config-dump", "config-dump NODE", "what pilot last sent NODE, as JSON"},
	{"outliers", "outliers [-o json]", "one row per endpoint proxies eject now: ENDPOINT, SERVICE,\n" +
		"EJECTED-BY (ejecting/reporting clients of the service),\nDETECTORS, SINCE"},
	{"token create", tokenUse, "print a bootstrap token for a workload's first certificate\n(a sidecar's --token-file)"},
	{"cert list", "cert list [-o json]", "one row per certificate the mesh CA issued:\nSERIAL, SPIFFE-ID, NOT-AFTER, STATE (VALID, EXPIRED, REVOKED)"},
	{"cert revoke", "cert revoke --serial S | --spiffe-id ID [--reason R]", "revoke a certificate, or every certificate of a SPIFFE ID;\nthe new CRL is published before it returns"},
	{"ca rotate", rotateUse, "root rotation: start (a new root signs; both trusted),\nfinish (drop the old root), status"},
	{"version", "version", "this build's version (also --version)"},
}

// kindsHelp lists the kinds with the short names get, delete and history accept.
func kindsHelp() string {
	var b strings.Builder
	b.WriteString("kinds (KIND is any of these, singular or plural, any case, or its short name):\n")
	for _, k := range resource.Kinds() {
		fmt.Fprintf(&b, "  %-4s %s\n", k.ShortName, k.Kind)
	}
	return b.String()
}

// usage is meshctl's help.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: meshctl [--pilot URL] [--token-file FILE] [--timeout D] COMMAND ...\n")
	b.WriteString("       meshctl COMMAND --help | meshctl --version\n\ncommands:\n")
	for _, c := range commandDocs {
		lines := strings.Split(c.about, "\n")
		if len(c.use) > 38 {
			fmt.Fprintf(&b, "  %s\n  %-38s  %s\n", c.use, "", lines[0])
		} else {
			fmt.Fprintf(&b, "  %-38s  %s\n", c.use, lines[0])
		}
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "  %-38s  %s\n", "", l)
		}
	}
	b.WriteString("\n" + kindsHelp())
	fmt.Fprintf(&b, "\nglobal flags:\n  --pilot URL        pilot's admin API (default %s)\n", DefaultPilot)
	b.WriteString("  --token-file FILE  file with the admin API bearer token\n")
	fmt.Fprintf(&b, "  --timeout D        timeout of one request to pilot (default %s)\n", DefaultTimeout)
	b.WriteString("  --version          print the version and exit\n")
	b.WriteString("\nexit codes: 0 ok, 1 invalid input (rollout: rejected), 2 other error, 3 If-Match conflict, 4 not found\n")
	return b.String()
}

// commandHelp is one command's help: synopsis, what it does, kinds where it
// takes one, and the flags of fs (nil: none).
func commandHelp(name string, fs *flag.FlagSet) string {
	var b strings.Builder
	for _, c := range commandDocs {
		if c.name == name {
			fmt.Fprintf(&b, "usage: meshctl %s\n\n%s\n", c.use, strings.ReplaceAll(c.about, "\n", " "))
		}
	}
	switch name {
	case "get", "delete", "history":
		b.WriteString("\n" + kindsHelp())
	}
	if fs != nil {
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			b.WriteString("\nflags:\n")
			fs.SetOutput(&b)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return b.String()
}

// cliError is an error with the exit code it maps to. lines, when set, are
// printed one per line instead of msg (validation errors).
type cliError struct {
	code  int
	msg   string
	lines []string
	help  string // set: a command's help was asked for; printed to stdout, exit 0
}

func (e *cliError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...)}
}

// env carries what every command needs.
type env struct {
	stdout, stderr io.Writer
	client         *client
}

// Run runs meshctl with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("meshctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pilot := fs.String("pilot", DefaultPilot, "pilot admin API URL")
	tokenFile := fs.String("token-file", "", "file with the admin API bearer token")
	timeout := fs.Duration("timeout", DefaultTimeout, "timeout of one request to pilot")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage())
			return ExitOK
		}
		return report(stdout, stderr, fail(ExitOther, "%v (try meshctl --help)", err))
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("meshctl"))
		return ExitOK
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage())
		return ExitOther
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	e := &env{stdout: stdout, stderr: stderr}
	var err error
	switch cmd {
	case "validate":
		err = e.validate(rest)
	case "inject":
		err = e.inject(rest)
	case "apply", "get", "delete", "history", "proxy-status", "rollout", "config-dump", "outliers", "token", "cert", "ca":
		c, cerr := newClient(*pilot, *tokenFile, *timeout)
		if cerr != nil {
			return report(stdout, stderr, cerr)
		}
		defer c.close()
		e.client = c
		switch cmd {
		case "apply":
			err = e.apply(ctx, rest)
		case "get":
			err = e.get(ctx, rest)
		case "delete":
			err = e.delete(ctx, rest)
		case "history":
			err = e.history(ctx, rest)
		case "proxy-status":
			err = e.proxyStatus(ctx, rest)
		case "rollout":
			err = e.rolloutStatus(ctx, rest)
		case "config-dump":
			err = e.configDump(ctx, rest)
		case "outliers":
			err = e.outliers(ctx, rest)
		case "token":
			err = e.tokenCmd(ctx, rest)
		case "cert":
			err = e.certCmd(ctx, rest)
		case "ca":
			err = e.caCmd(ctx, rest)
		}
	case "version":
		fmt.Fprintln(stdout, version.String("meshctl"))
		return ExitOK
	case "help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usage())
			return ExitOK
		}
		// "help CMD" is "CMD --help": the command prints its own flags.
		return Run(ctx, []string{rest[0], "--help"}, stdout, stderr)
	default:
		err = fail(ExitOther, "unknown command %q (try meshctl help)", cmd)
	}
	return report(stdout, stderr, err)
}

// report prints err (one line, or one line per validation error) and returns
// its exit code. A help request prints the help to stdout.
func report(stdout, stderr io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	var ce *cliError
	if !errors.As(err, &ce) {
		ce = &cliError{code: ExitOther, msg: err.Error()}
	}
	if ce.help != "" {
		fmt.Fprint(stdout, ce.help)
		return ExitOK
	}
	if len(ce.lines) > 0 {
		for _, l := range ce.lines {
			fmt.Fprintln(stderr, oneLine(l))
		}
	} else {
		fmt.Fprintln(stderr, "meshctl: "+oneLine(ce.msg))
	}
	return ce.code
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// listArgs parses the flags of a listing command (fs, no arguments, usage
// use): -o json or, by default, a table; asJSON says which.
func listArgs(fs *flag.FlagSet, args []string, use string) (asJSON bool, err error) {
	out := fs.String("o", "", "output: json (default a table)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return false, err
	}
	if len(pos) > 0 {
		return false, fail(ExitOther, "usage: %s", use)
	}
	if *out != "" && *out != "json" {
		return false, fail(ExitOther, "-o %q: want json", *out)
	}
	return *out == "json", nil
}

// printJSON writes v to stdout as indented JSON and a newline.
func (e *env) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fail(ExitOther, "encoding JSON: %v", err)
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", b)
	return err
}

// printTable writes header and the lines rows writes (cells tab-separated,
// each line ending in a newline) to stdout in aligned columns.
func (e *env) printTable(header string, rows func(w io.Writer)) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	if err := tw.Flush(); err != nil {
		return fail(ExitOther, "writing output: %v", err)
	}
	return nil
}

// parseArgs parses fs over args allowing flags after positional arguments
// ("get routes cart -n shop"), which package flag alone does not.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) { // -h, -help, --help
				return nil, &cliError{code: ExitOK, help: commandHelp(fs.Name(), fs)}
			}
			return nil, fail(ExitOther, "%s: %v (try meshctl %s --help)", fs.Name(), err, fs.Name())
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// errorLines splits a decode/validation error into one line per error.
func errorLines(err error) []string {
	var el resource.ErrorList
	if errors.As(err, &el) {
		out := make([]string, 0, len(el))
		for _, e := range el {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func (e *env) validate(args []string) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("f", "", "file or directory to validate")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *path == "" || len(pos) > 0 {
		return fail(ExitOther, "usage: meshctl validate -f PATH")
	}
	objs, err := decodeSet(*path, e.stderr, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: %s valid\n", *path, objects(len(objs)))
	return nil
}

// decodeSet decodes path and runs the cross-object checks offline. Warnings go to
// stderr only when warn is set: for apply, pilot checks against everything stored
// and answers with the warnings that really hold, so the file alone would mislead
// (a Route applied on its own is not missing its stored Service).
func decodeSet(path string, stderr io.Writer, warn bool) ([]*resource.Object, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fail(ExitInvalid, "%v", err)
	}
	objs, err := resource.DecodePath(path)
	if err != nil {
		return nil, &cliError{code: ExitInvalid, msg: err.Error(), lines: errorLines(err)}
	}
	errs, warns := resource.ValidateSet(objs)
	for _, w := range warns {
		if warn {
			fmt.Fprintln(stderr, "warning: "+oneLine(w))
		}
	}
	if len(errs) > 0 {
		return nil, &cliError{code: ExitInvalid, msg: errs.Error(), lines: errorLines(errs)}
	}
	return objs, nil
}

// statusError maps a non-2xx answer to an exit code.
func statusError(status int, errs []string) error {
	code := ExitOther
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		code = ExitInvalid
	case http.StatusPreconditionFailed:
		code = ExitConflict
	case http.StatusNotFound:
		code = ExitNotFound
	}
	if len(errs) == 0 {
		errs = []string{http.StatusText(status)}
	}
	ce := &cliError{code: code, msg: fmt.Sprintf("pilot answered %d: %s", status, strings.Join(errs, "; "))}
	if code == ExitInvalid && len(errs) > 1 {
		ce.lines = errs
	}
	return ce
}

// isHelpFlag is what package flag takes as a request for help.
func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
