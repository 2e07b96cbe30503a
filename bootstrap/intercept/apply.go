package intercept

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	// CommandTimeout bounds each iptables-save/-restore run.
	CommandTimeout = 30 * time.Second
	// LockWaitSeconds is how long iptables-restore waits for the xtables lock
	// (legacy backend; nft ignores it) before failing.
	LockWaitSeconds = 10
)

// searchDirs are tried when a tool is not on PATH (a minimal image running as root
// with a PATH without sbin).
var searchDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"}

func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range searchDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH nor in %s", name, strings.Join(searchDirs, ", "))
}

// tool names the binaries of one backend and family: iptables-nft-restore,
// ip6tables-legacy-save...
func tool(b Backend, v6 bool, verb string) string {
	base := "iptables"
	if v6 {
		base = "ip6tables"
	}
	return fmt.Sprintf("%s-%s-%s", base, b, verb)
}

func run(ctx context.Context, name string, stdin []byte, args ...string) ([]byte, error) {
	path, err := lookTool(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// save runs <family>tables-<backend>-save.
func save(ctx context.Context, b Backend, v6 bool) (string, error) {
	out, err := run(ctx, tool(b, v6, "save"), nil)
	return string(out), err
}

func restore(ctx context.Context, b Backend, v6 bool, input string) error {
	_, err := run(ctx, tool(b, v6, "restore"), []byte(input), "--noflush", fmt.Sprintf("--wait=%d", LockWaitSeconds))
	return err
}

// savedTable is what iptables-save shows of one table.
type savedTable struct {
	chains []string // every chain declared (":NAME POLICY [p:b]")
	rules  []string // every "-A CHAIN ..." line
}

// parseSave reads iptables-save output into tables by name.
func parseSave(s string) map[string]*savedTable {
	tables := map[string]*savedTable{}
	var cur *savedTable
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &savedTable{}
			tables[line[1:]] = cur
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				cur.chains = append(cur.chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			cur.rules = append(cur.rules, line)
		}
	}
	return tables
}

// ruleChainTarget returns an "-A" line's chain and its jump/goto target ("" if none).
func ruleChainTarget(rule string) (chain, target string) {
	f := strings.Fields(rule)
	if len(f) >= 2 {
		chain = f[1]
	}
	for i := 2; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" || f[i] == "--jump" || f[i] == "--goto" {
			target = f[i+1]
		}
	}
	return chain, target
}

// present lists the own chains that exist in a saved table, and the rules outside
// them that jump to them (as "-D" lines).
func present(t *savedTable, table string) (chains, jumpDeletes []string) {
	if t == nil {
		return nil, nil
	}
	for _, c := range t.chains {
		if isOwnChain(table, c) {
			chains = append(chains, c)
		}
	}
	for _, r := range t.rules {
		chain, target := ruleChainTarget(r)
		if isOwnChain(table, target) && !isOwnChain(table, chain) {
			jumpDeletes = append(jumpDeletes, "-D"+strings.TrimPrefix(r, "-A"))
		}
	}
	return chains, jumpDeletes
}

// restoreInput is the one-transaction-per-table input that turns the saved state into
// want (nil: remove everything of ours): declare (flush or create) our existing and
// wanted chains, delete the jumps to ours, delete our chains not wanted, append want's
// rules. Tables we neither have nor want are not mentioned.
func restoreInput(saved map[string]*savedTable, want []*ruleTable) string {
	var b strings.Builder
	for _, tc := range ownChains {
		var w *ruleTable
		for _, t := range want {
			if t.name == tc.table {
				w = t
			}
		}
		have, deletes := present(saved[tc.table], tc.table)
		if w == nil && len(have) == 0 && len(deletes) == 0 {
			continue
		}
		out := &ruleTable{name: tc.table}
		if w != nil {
			out.rules = w.rules
			out.chains = append(out.chains, w.chains...)
		}
		var removes []string
		for _, c := range have {
			if !contains(out.chains, c) {
				out.chains = append(out.chains, c) // flushed first, then -X
				removes = append(removes, c)
			}
		}
		writeTable(&b, out, deletes, removes)
	}
	return b.String()
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Result says what Apply or Remove did.
type Result struct {
	Backend Backend
	// Why the backend was chosen (auto), or "--backend".
	BackendReason string
	IPv6          bool
	// Rules is the number of rules now installed (Apply) or removed chains (Remove).
	Count int
}

// Apply installs cfg's rules in the current network namespace, idempotently: our
// chains are created or flushed and refilled, jumps to them deleted and re-added, each
// table in one iptables-restore transaction. Chains of ours that cfg no longer uses
// (DNS turned off, ebpf mode) are removed. On a failure none of ours is left (no pod
// half-intercepted), and the error says what failed.
func Apply(ctx context.Context, cfg Config) error {
	_, err := ApplyResult(ctx, cfg)
	return err
}

// ApplyResult is Apply, also saying what it chose.
func ApplyResult(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	backends, reason, err := chooseBackends(ctx, cfg.Backend, false)
	if err != nil {
		return Result{}, err
	}
	res := Result{Backend: backends[0], BackendReason: reason, IPv6: wantIPv6(cfg.IPv6)}
	if res.IPv6 && !haveTools(res.Backend, true) {
		// IPv6 traffic would go uncaptured: refuse rather than half-apply.
		return res, fmt.Errorf("--ipv6 %s: this netns has IPv6 but %s is missing (install it, or pass --ipv6=false)",
			cfg.IPv6, tool(res.Backend, true, "restore"))
	}
	if res.IPv6 {
		if err := addPassthroughV6(); err != nil {
			return res, err
		}
	}
	for i, v6 := range families(res.IPv6) {
		err := applyFamily(ctx, res.Backend, v6, ruleSet(cfg, v6))
		if err == nil {
			for _, t := range ruleSet(cfg, v6) {
				res.Count += len(t.rules)
			}
			continue
		}
		// iptables-restore commits table by table, and IPv4 may be in while IPv6
		// failed: take ours out of every family touched rather than leave the pod
		// half-intercepted (the caller fails; an init container stops the pod).
		for _, undo := range families(res.IPv6)[:i+1] {
			if uerr := applyFamily(ctx, res.Backend, undo, nil); uerr != nil {
				err = fmt.Errorf("%w; and removing the partial rules failed: %v", err, uerr)
			}
		}
		return res, err
	}
	return res, nil
}

// applyFamily replaces ours in one family with want (nil: removes them).
func applyFamily(ctx context.Context, b Backend, v6 bool, want []*ruleTable) error {
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	saved, err := save(ctx, b, v6)
	if err != nil {
		return fmt.Errorf("reading the current %s rules: %w", fam, err)
	}
	in := restoreInput(parseSave(saved), want)
	if in == "" {
		return nil
	}
	if err := restore(ctx, b, v6, in); err != nil {
		return fmt.Errorf("installing the %s rules: %w", fam, err)
	}
	return nil
}

// Remove deletes exactly our chains and the jumps to them, in both families (IPv6
// when ip6tables is there). With BackendAuto it cleans every backend that holds any
// of ours. Removing when nothing is installed is not an error.
func Remove(ctx context.Context, cfg Config) error {
	_, err := RemoveResult(ctx, cfg)
	return err
}

// RemoveResult is Remove, also saying what it did.
func RemoveResult(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	backends, reason, err := chooseBackends(ctx, cfg.Backend, true)
	if err != nil {
		return Result{}, err
	}
	res := Result{Backend: backends[0], BackendReason: reason, IPv6: cfg.IPv6 != IPv6Off}
	for _, b := range backends {
		for _, v6 := range families(res.IPv6) {
			if v6 && !haveTools(b, true) {
				continue // no ip6tables in this image: nothing of ours can be there
			}
			saved, err := save(ctx, b, v6)
			if err != nil {
				return res, fmt.Errorf("reading the current rules: %w", err)
			}
			tables := parseSave(saved)
			in := restoreInput(tables, nil)
			if in == "" {
				continue
			}
			if err := restore(ctx, b, v6, in); err != nil {
				return res, fmt.Errorf("removing the rules: %w", err)
			}
			for _, tc := range ownChains {
				have, _ := present(tables[tc.table], tc.table)
				res.Count += len(have)
			}
		}
	}
	return res, nil
}

func families(v6 bool) []bool {
	if v6 {
		return []bool{false, true}
	}
	return []bool{false}
}

func haveTools(b Backend, v6 bool) bool {
	_, err1 := lookTool(tool(b, v6, "save"))
	_, err2 := lookTool(tool(b, v6, "restore"))
	return err1 == nil && err2 == nil
}

// chooseBackends resolves --backend. auto: the backend that already holds rules in
// this netns (more rules wins; ours count first), else nft. For removal, auto is
// every backend holding chains of ours (first: the one reported).
func chooseBackends(ctx context.Context, b Backend, removal bool) ([]Backend, string, error) {
	if b != BackendAuto {
		if !haveTools(b, false) {
			return nil, "", fmt.Errorf("--backend %s: %s/%s not found", b, tool(b, false, "save"), tool(b, false, "restore"))
		}
		return []Backend{b}, "--backend " + string(b), nil
	}
	type count struct {
		b          Backend
		rules, own int
	}
	var counts []count
	for _, cand := range []Backend{BackendNFT, BackendLegacy} {
		if !haveTools(cand, false) {
			continue
		}
		c := count{b: cand}
		for _, v6 := range []bool{false, true} {
			if v6 && !haveTools(cand, true) {
				continue
			}
			// A backend whose save fails (legacy on a kernel without the
			// x_tables modules) holds nothing.
			s, err := save(ctx, cand, v6)
			if err != nil {
				continue
			}
			for name, t := range parseSave(s) {
				c.rules += len(t.rules)
				have, jumps := present(t, name)
				c.own += len(have) + len(jumps)
			}
		}
		counts = append(counts, c)
	}
	if len(counts) == 0 {
		return nil, "", errors.New("--backend auto: neither iptables-nft-restore nor iptables-legacy-restore found")
	}
	if removal {
		var bs []Backend
		for _, c := range counts {
			if c.own > 0 {
				bs = append(bs, c.b)
			}
		}
		if len(bs) == 0 {
			return []Backend{counts[0].b}, "auto: no chains of ours in any backend", nil
		}
		return bs, "auto: backends holding chains of ours", nil
	}
	best := counts[0]
	for _, c := range counts[1:] {
		if c.own > best.own || (c.own == best.own && c.rules > best.rules) {
			best = c
		}
	}
	switch {
	case best.own > 0:
		return []Backend{best.b}, "auto: it holds chains of ours", nil
	case best.rules > 0:
		return []Backend{best.b}, fmt.Sprintf("auto: it holds %d rules in this netns", best.rules), nil
	}
	for _, c := range counts {
		if c.b == BackendNFT {
			return []Backend{BackendNFT}, "auto: no rules in this netns, nft by default", nil
		}
	}
	return []Backend{counts[0].b}, "auto: no rules in this netns and no nft tools", nil
}

// wantIPv6 resolves --ipv6: auto is "this netns has an IPv6 address" (::1 on lo
// counts: loopback traffic is part of the rule set).
func wantIPv6(m IPv6) bool {
	switch m {
	case IPv6On:
		return true
	case IPv6Off:
		return false
	}
	// thread-self: /proc/net is the main thread's netns, and a caller may have
	// entered the pod's on its own thread (tests, a Go init step).
	b, err := os.ReadFile("/proc/thread-self/net/if_inet6")
	if err != nil {
		b, err = os.ReadFile("/proc/net/if_inet6")
	}
	return err == nil && len(bytes.TrimSpace(b)) > 0
}
