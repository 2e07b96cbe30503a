package meshctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weft-mesh/weft/certs/manifest"
	"github.com/weft-mesh/weft/pilot/api"
	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// statusPrefix is pilot's xDS status API (pilot/status).
const statusPrefix = "/apis/status/v1"

// DefaultRolloutTimeout bounds rollout status --wait.
const DefaultRolloutTimeout = 5 * time.Minute

// rolloutPoll is how often rollout status --wait asks pilot.
const rolloutPoll = 200 * time.Millisecond

// proxyColumns are proxy-status's per-type columns, in push order.
var proxyColumns = []struct{ name, typeURL string }{
	{"CDS", snapshot.ClusterType}, {"EDS", snapshot.EndpointType}, {"LDS", snapshot.ListenerType},
	{"RDS", snapshot.RouteType}, {"MANIFEST", manifest.TypeURL},
}

// proxyStatus prints one row per proxy pilot knows.
func (e *env) proxyStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("proxy-status", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fail(ExitOther, "usage: meshctl proxy-status")
	}
	var resp struct {
		Proxies []status.ProxyStatus `json:"proxies"`
		// Replicas: pilot replicas on one store (etcd) answer for all of them.
		Replicas []status.ReplicaAnswer `json:"replicas"`
	}
	if err := e.client.getJSON(ctx, statusPrefix+"/proxies", &resp); err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	head := []string{"NODE"}
	for _, c := range proxyColumns {
		head = append(head, c.name)
	}
	head = append(head, "EFFECTIVE REV", "CONNECTED", "LAST SEEN")
	if len(resp.Replicas) > 0 {
		head = append(head, "REPLICA")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	var notes []string
	for _, r := range resp.Replicas {
		if r.Error != "" {
			notes = append(notes, fmt.Sprintf("pilot replica %s did not answer (its proxies are missing above): %s", r.ID, oneLine(r.Error)))
		}
	}
	for _, ps := range resp.Proxies {
		row := []string{ps.Node}
		for _, c := range proxyColumns {
			row = append(row, typeCell(ps, c.typeURL))
		}
		row = append(row, strconv.FormatInt(ps.EffectiveRevision, 10), age(now, ps.ConnectedSince), age(now, ps.LastSeen)+" ago")
		if len(resp.Replicas) > 0 {
			row = append(row, ps.Replica)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		for _, ts := range ps.Types {
			if ts.Status == status.Nacked {
				notes = append(notes, fmt.Sprintf("%s %s NACKED version %s: %s", ps.Node, columnName(ts.TypeURL), ts.VersionRejected, oneLine(ts.Error)))
			}
		}
		if ps.NotCurrent {
			notes = append(notes, fmt.Sprintf("%s: sent a snapshot not current for its stream: pilot's compile of store revision %d (when the stream opened) "+
				"did not come within --xds-current-wait; a Weft sidecar is not ready on it", ps.Node, ps.StreamRevision))
		}
		if ps.GenError != "" {
			notes = append(notes, fmt.Sprintf("%s: pilot refused its snapshot at revision %d (not sent): %s", ps.Node, ps.GenErrorRevision, oneLine(ps.GenError)))
		}
	}
	if err := tw.Flush(); err != nil {
		return fail(ExitOther, "writing output: %v", err)
	}
	for _, n := range notes {
		fmt.Fprintln(e.stdout, n)
	}
	return nil
}

// typeCell is one type's state; a type the proxy never asked for is "-".
func typeCell(ps status.ProxyStatus, typeURL string) string {
	for _, ts := range ps.Types {
		if ts.TypeURL != typeURL {
			continue
		}
		if ps.Status == status.Disconnected {
			return string(status.Disconnected)
		}
		return string(ts.Status)
	}
	return "-"
}

func columnName(typeURL string) string {
	for _, c := range proxyColumns {
		if c.typeURL == typeURL {
			return c.name
		}
	}
	return typeURL
}

// age renders a duration since t coarsely (like kubectl's AGE column).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// rolloutStatus reports how far a store revision has rolled out; with --wait it
// follows it: exit 0 once every connected proxy has it effective, 1 at once on a
// NACK (naming the proxies and their errors), 2 at the timeout.
func (e *env) rolloutStatus(ctx context.Context, args []string) error {
	if len(args) > 0 && isHelpFlag(args[0]) { // rollout --help: its one subcommand's help
		args = []string{"status", args[0]}
	}
	if len(args) == 0 || args[0] != "status" {
		return fail(ExitOther, "usage: meshctl rollout status [REV] [--wait] [--timeout D]")
	}
	fs := flag.NewFlagSet("rollout status", flag.ContinueOnError)
	wait := fs.Bool("wait", false, "wait until the revision is effective everywhere, or a proxy rejects it")
	timeout := fs.Duration("timeout", DefaultRolloutTimeout, "give up waiting after this long (exit 2)")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fail(ExitOther, "usage: meshctl rollout status [REV] [--wait] [--timeout D]")
	}
	if *timeout <= 0 {
		return fail(ExitOther, "--timeout %v must be positive", *timeout)
	}
	var rev int64
	if len(pos) == 1 {
		if rev, err = strconv.ParseInt(pos[0], 10, 64); err != nil || rev < 0 {
			return fail(ExitOther, "revision %q: want a non-negative integer", pos[0])
		}
	} else if rev, err = e.storeRevision(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for {
		var rs status.RevisionStatus
		if err := e.client.getJSON(ctx, fmt.Sprintf("%s/revisions/%d", statusPrefix, rev), &rs); err != nil {
			return err
		}
		if rs.Rejected > 0 {
			printRollout(e, rs)
			return &cliError{code: ExitInvalid, msg: rejectedMsg(rs)}
		}
		// Right after a write pilot may not have built the revision yet: no proxy
		// can have it then, even when none is connected.
		latest := status.RevisionStatus{Revision: -1} // 404: nothing built yet
		if err := e.client.getJSON(ctx, statusPrefix+"/revisions/latest", &latest); err != nil {
			if ce, ok := err.(*cliError); !ok || ce.code != ExitNotFound {
				return err
			}
		}
		built := latest.Revision >= rev
		if rs.Converged && built {
			printRollout(e, rs)
			return nil
		}
		if !*wait {
			printRollout(e, rs)
			if !built {
				return fail(ExitOther, "pilot has not built revision %d yet (latest built: %d)", rev, latest.Revision)
			}
			return fail(ExitOther, "revision %d is not effective everywhere yet (%d of %d proxies)", rev, rs.Effective, rs.Connected)
		}
		if time.Now().After(deadline) {
			printRollout(e, rs)
			return fail(ExitOther, "timed out after %v waiting for revision %d: %d of %d proxies have it effective, %d pending",
				*timeout, rev, rs.Effective, rs.Connected, rs.Pending)
		}
		t := time.NewTimer(rolloutPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fail(ExitOther, "interrupted waiting for revision %d: %v", rev, ctx.Err())
		case <-t.C:
		}
	}
}

func printRollout(e *env, rs status.RevisionStatus) {
	stored := "write time not known"
	if rs.WrittenAt != nil {
		stored = "stored " + rs.WrittenAt.UTC().Format(time.RFC3339Nano)
	}
	pct := 100.0
	if rs.Connected > 0 {
		pct = 100 * float64(rs.Effective) / float64(rs.Connected)
	}
	fmt.Fprintf(e.stdout, "revision %d: %s\n", rs.Revision, stored)
	fmt.Fprintf(e.stdout, "effective: %d of %d connected proxies (%.1f%%)\n", rs.Effective, rs.Connected, pct)
	fmt.Fprintf(e.stdout, "pending: %d\n", rs.Pending)
	fmt.Fprintf(e.stdout, "rejected: %d\n", rs.Rejected)
	for _, r := range rs.Rejections {
		fmt.Fprintf(e.stdout, "  %s %s version %s (nonce %s): %s\n", r.Node, r.Type, r.Version, r.Nonce, oneLine(r.Error))
	}
	if rs.Converged && rs.ConvergenceSeconds != nil {
		fmt.Fprintf(e.stdout, "converged %.3fs after the write\n", *rs.ConvergenceSeconds)
	}
}

func rejectedMsg(rs status.RevisionStatus) string {
	var parts []string
	for _, r := range rs.Rejections {
		parts = append(parts, fmt.Sprintf("%s rejected %s: %s", r.Node, r.Type, oneLine(r.Error)))
	}
	return fmt.Sprintf("revision %d rejected by %d of %d proxies: %s", rs.Revision, rs.Rejected, rs.Connected, strings.Join(parts, "; "))
}

// storeRevision is pilot's current store revision (every answer carries it).
func (e *env) storeRevision(ctx context.Context) (int64, error) {
	r, err := e.client.do(ctx, http.MethodGet, "/healthz", nil, nil)
	if err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(r.header.Get(api.RevisionHeader), 10, 64)
	if err != nil {
		return 0, fail(ExitOther, "pilot's %s header %q is not a revision", api.RevisionHeader, r.header.Get(api.RevisionHeader))
	}
	return rev, nil
}

// configDump prints, as JSON, what pilot last sent one proxy.
func (e *env) configDump(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("config-dump", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return fail(ExitOther, "usage: meshctl config-dump NODE")
	}
	r, err := e.client.do(ctx, http.MethodGet, statusPrefix+"/proxies/"+url.PathEscape(pos[0])+"/config_dump", nil,
		map[string]string{"Accept": "application/json"})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, r.body, "", "  "); err != nil {
		return fail(ExitOther, "pilot answered malformed JSON: %v", err)
	}
	out.WriteByte('\n')
	_, err = e.stdout.Write(bytes.ReplaceAll(out.Bytes(), []byte("\n\n"), []byte("\n")))
	return err
}
