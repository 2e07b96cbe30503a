package intercept

import (
	"strings"
	"testing"
)

// FuzzParsePorts: never panics; what it accepts is within the limits, valid, free of
// duplicates, and reads back the same from its own spelling.
func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{"", "80", "80,443", " 80 , 443 ", "1:65535", "9000:9100,9000", "0", "65536", "80,,", "*", "5:4", ":", "1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePorts(s)
		if err != nil {
			return
		}
		if len(ps) > MaxPorts {
			t.Fatalf("%q: %d ports", s, len(ps))
		}
		var spelled []string
		for i, r := range ps {
			if r.Lo == 0 || r.Hi < r.Lo {
				t.Fatalf("%q: bad range %v", s, r)
			}
			for _, q := range ps[:i] {
				if q == r {
					t.Fatalf("%q: duplicate %v", s, r)
				}
			}
			spelled = append(spelled, r.String())
		}
		again, err := ParsePorts(strings.Join(spelled, ","))
		if err != nil || len(again) != len(ps) {
			t.Fatalf("%q: round trip %v: %v %v", s, spelled, again, err)
		}
		for i := range ps {
			if again[i] != ps[i] {
				t.Fatalf("%q: round trip %v != %v", s, again, ps)
			}
		}
	})
}

// FuzzParseCIDRs: never panics; accepted prefixes are canonical, unique, within the
// limit, and read back the same.
func FuzzParseCIDRs(f *testing.F) {
	for _, s := range []string{"", "10.0.0.0/8", "10.0.0.1", "fd00::/8,10.96.0.0/12", "2001:db8::1", "10.0.0.1/8", "*", "::ffff:1.2.3.4", "fe80::1%lo", "1.2.3.4/33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseCIDRs(s)
		if err != nil {
			return
		}
		if len(ps) > MaxCIDRs {
			t.Fatalf("%q: %d CIDRs", s, len(ps))
		}
		var spelled []string
		for i, p := range ps {
			if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
				t.Fatalf("%q: accepted %v", s, p)
			}
			for _, q := range ps[:i] {
				if q == p {
					t.Fatalf("%q: duplicate %v", s, p)
				}
			}
			spelled = append(spelled, p.String())
		}
		again, err := ParseCIDRs(strings.Join(spelled, ","))
		if err != nil || len(again) != len(ps) {
			t.Fatalf("%q: round trip: %v %v", s, again, err)
		}
	})
}

// FuzzParseArgs: a command line (fields split on NUL) never panics; an accepted one is
// valid and gives deterministic rules whose every line is a declaration, a rule of a
// chain of ours or a jump from a built-in chain, or COMMIT.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"",
		"-p\x0015001\x00-z\x0015006\x00-u\x001337\x00-g\x001337\x00-b\x00*",
		"-b\x0080,443\x00-d\x0090\x00-o\x00ab",
		"--mode\x00ebpf\x00-d\x009090",
		"-x\x0010.0.0.0/8,fd00::/8\x00--dns=false",
		"--dns-port\x0015001",
		"--ipv6\x00--backend\x00legacy",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var args []string
		if s != "" {
			args = strings.Split(s, "\x00")
		}
		p, err := ParseArgs(args)
		if err != nil || p.Help {
			return
		}
		if err := p.Config.Validate(); err != nil {
			t.Fatalf("%q: accepted, then %v", args, err)
		}
		for _, v6 := range []bool{false, true} {
			r := Rules(p.Config, v6)
			if r != Rules(p.Config, v6) {
				t.Fatalf("%q: not deterministic", args)
			}
			table := ""
			for _, line := range strings.Split(strings.TrimSuffix(r, "\n"), "\n") {
				switch {
				case strings.HasPrefix(line, "*"):
					table = line[1:]
				case line == "COMMIT":
				case strings.HasPrefix(line, ":"):
					name, _, _ := strings.Cut(line[1:], " ")
					if !isOwnChain(table, name) {
						t.Fatalf("%q: declares %s in %s", args, name, table)
					}
				case strings.HasPrefix(line, "-A "):
					chain, target := ruleChainTarget(line)
					if !isOwnChain(table, chain) && !(isOwnChain(table, target) && (chain == "OUTPUT" || chain == "PREROUTING")) {
						t.Fatalf("%q: rule outside our chains: %s", args, line)
					}
				default:
					t.Fatalf("%q: unexpected line %q", args, line)
				}
			}
		}
	})
}
