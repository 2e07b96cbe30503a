package meshctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/store"
)

// noIfMatch marks an unset --if-match (generations are >= 0).
const noIfMatch = -1

func (e *env) apply(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	path := fs.String("f", "", "file or directory to apply")
	ifMatch := fs.Int64("if-match", noIfMatch, "generation the object must have now (0 = must not exist); needs exactly one object")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *path == "" || len(pos) > 0 {
		return fail(ExitOther, "usage: meshctl apply -f PATH [--if-match GEN]")
	}
	if *ifMatch < noIfMatch {
		return fail(ExitInvalid, "--if-match %d: a generation is >= 0", *ifMatch)
	}
	// Decode and check locally first so errors name the file they came from.
	objs, err := decodeSet(*path, e.stderr, false)
	if err != nil {
		return err
	}
	req := api.ApplyRequest{Items: make([]json.RawMessage, 0, len(objs))}
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return fail(ExitOther, "%s: encoding: %v", o, err)
		}
		req.Items = append(req.Items, b)
	}
	if *ifMatch != noIfMatch {
		if len(objs) != 1 {
			return fail(ExitInvalid, "--if-match needs exactly one object, %s holds %d", *path, len(objs))
		}
		req.IfMatch = map[string]int64{objs[0].Key().String(): *ifMatch}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fail(ExitOther, "encoding apply request: %v", err)
	}
	r, err := e.client.do(ctx, http.MethodPost, api.Prefix+"/apply", body, map[string]string{"Content-Type": "application/json"})
	if err != nil {
		return err
	}
	var resp api.ApplyResponse
	if err := r.decode(&resp); err != nil {
		return err
	}
	for _, w := range resp.Warnings {
		fmt.Fprintln(e.stderr, "warning: "+oneLine(w))
	}
	for _, o := range resp.Items {
		fmt.Fprintf(e.stdout, "%s generation %d revision %d\n", o.Key(), o.Metadata.Generation, o.Metadata.Revision)
	}
	if resp.Changed {
		fmt.Fprintf(e.stdout, "applied %s: store revision %d\n", objects(len(resp.Items)), resp.Revision)
	} else {
		fmt.Fprintf(e.stdout, "unchanged: %s already as given, store revision %d\n", objects(len(resp.Items)), resp.Revision)
	}
	return nil
}

// target is a KIND [NAME] [-n NS] argument set.
type target struct {
	kind resource.KindInfo
	ns   string
	name string
}

func (t target) path(allNS bool) string {
	return resourcePath(t.kind.Plural, t.kind.Namespaced, t.ns, t.name, allNS)
}

func parseTarget(pos []string, ns string, wantName bool, usage string) (target, error) {
	if len(pos) < 1 || len(pos) > 2 || (wantName && len(pos) != 2) {
		return target{}, fail(ExitOther, "usage: %s", usage)
	}
	ki, err := resource.ResolveKind(pos[0])
	if err != nil {
		return target{}, fail(ExitInvalid, "%v", err)
	}
	t := target{kind: ki, ns: ns}
	if !ki.Namespaced {
		t.ns = ""
	}
	if len(pos) == 2 {
		t.name = pos[1]
	}
	return t, nil
}

func (e *env) get(ctx context.Context, args []string) error {
	const use = "meshctl get KIND [NAME] [-n NS] [-A] [-o yaml|json]"
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	ns := fs.String("n", resource.DefaultNamespace, "namespace")
	all := fs.Bool("A", false, "all namespaces")
	out := fs.String("o", "", "output: yaml or json (default a table)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	t, err := parseTarget(pos, *ns, false, use)
	if err != nil {
		return err
	}
	if *all && t.name != "" {
		return fail(ExitOther, "-A lists a kind; it does not go with a NAME")
	}
	switch *out {
	case "yaml":
		r, err := e.client.do(ctx, http.MethodGet, t.path(*all), nil, map[string]string{"Accept": "application/yaml"})
		if err != nil {
			return err
		}
		_, werr := e.stdout.Write(r.body)
		return werr
	case "json", "":
	default:
		return fail(ExitOther, "-o %q: want yaml or json", *out)
	}
	var objs []*resource.Object
	var v any
	if t.name != "" {
		var resp api.ObjectResponse
		if err := e.client.getJSON(ctx, t.path(false), &resp); err != nil {
			return err
		}
		objs, v = []*resource.Object{resp.Object}, resp.Object
	} else {
		var resp api.ListResponse
		if err := e.client.getJSON(ctx, t.path(*all), &resp); err != nil {
			return err
		}
		objs, v = resp.Items, resp.Items
	}
	if *out == "json" {
		return e.printJSON(v)
	}
	if len(objs) == 0 {
		fmt.Fprintf(e.stderr, "no %s found\n", t.kind.Plural)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	svc := t.kind.Kind == resource.KindService
	if svc {
		fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tADDRESSES\tGENERATION\tREVISION")
	} else {
		fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tGENERATION\tREVISION")
	}
	for _, o := range objs {
		nsCol := o.Metadata.Namespace
		if nsCol == "" {
			nsCol = "-"
		}
		if svc {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", o.Kind, nsCol, o.Metadata.Name, serviceAddresses(o), o.Metadata.Generation, o.Metadata.Revision)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", o.Kind, nsCol, o.Metadata.Name, o.Metadata.Generation, o.Metadata.Revision)
	}
	return tw.Flush()
}

// serviceAddresses is a listed Service's VIPs for the table: spec.addresses
// when set, else those pilot allocated (status.addresses), comma-separated;
// "<none>" when it has neither. The client decodes a spec as a generic map.
func serviceAddresses(o *resource.Object) string {
	var addrs []string
	if m, ok := o.Spec.(map[string]any); ok {
		l, _ := m["addresses"].([]any)
		for _, a := range l {
			if s, ok := a.(string); ok {
				addrs = append(addrs, s)
			}
		}
	}
	if len(addrs) == 0 && o.Status != nil {
		addrs = o.Status.Addresses
	}
	if len(addrs) == 0 {
		return "<none>"
	}
	return strings.Join(addrs, ",")
}

func (e *env) delete(ctx context.Context, args []string) error {
	const use = "meshctl delete KIND NAME [-n NS] [--if-match GEN]"
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	ns := fs.String("n", resource.DefaultNamespace, "namespace")
	ifMatch := fs.Int64("if-match", noIfMatch, "generation the object must have now")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	t, err := parseTarget(pos, *ns, true, use)
	if err != nil {
		return err
	}
	if *ifMatch < noIfMatch {
		return fail(ExitInvalid, "--if-match %d: a generation is >= 0", *ifMatch)
	}
	hdr := map[string]string{}
	if *ifMatch != noIfMatch {
		hdr["If-Match"] = strconv.FormatInt(*ifMatch, 10)
	}
	r, err := e.client.do(ctx, http.MethodDelete, t.path(false), nil, hdr)
	if err != nil {
		return err
	}
	var resp api.DeleteResponse
	if err := r.decode(&resp); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s deleted: store revision %d\n", resp.Deleted, resp.Revision)
	return nil
}

func (e *env) history(ctx context.Context, args []string) error {
	const use = "meshctl history KIND NAME [-n NS]"
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	ns := fs.String("n", resource.DefaultNamespace, "namespace")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	t, err := parseTarget(pos, *ns, true, use)
	if err != nil {
		return err
	}
	// Aligned columns under a header; every other line starts with its revision.
	// Pilot pages history; meshctl follows the pages (at most maxHistoryPages).
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tOP\tGENERATION\tTIME")
	var after int64
	for page := 0; ; page++ {
		if page == maxHistoryPages {
			fmt.Fprintf(tw, "... more history after revision %d (meshctl reads at most %d pages)\n", after, maxHistoryPages)
			break
		}
		var resp api.HistoryResponse
		path := fmt.Sprintf("%s/history?limit=%d&after=%d", t.path(false), store.MaxHistoryPage, after)
		if err := e.client.getJSON(ctx, path, &resp); err != nil {
			return err
		}
		for _, h := range resp.History {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", h.Revision, h.Op, h.Generation, h.Time.UTC().Format(time.RFC3339))
		}
		if resp.Next == 0 || resp.Next <= after {
			break
		}
		after = resp.Next
	}
	return tw.Flush()
}

// maxHistoryPages bounds how many pages of history meshctl history reads.
const maxHistoryPages = 100

func objects(n int) string {
	if n == 1 {
		return "1 object"
	}
	return strconv.Itoa(n) + " objects"
}
