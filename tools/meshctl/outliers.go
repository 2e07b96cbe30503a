package meshctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weft-mesh/weft/pilot/status/outlieragg"
)

// outliers prints pilot's outlier aggregate: one row per ejected endpoint, most
// ejecting proxies first.
func (e *env) outliers(ctx context.Context, args []string) error {
	asJSON, err := listArgs(flag.NewFlagSet("outliers", flag.ContinueOnError), args, "meshctl outliers [-o json]")
	if err != nil {
		return err
	}
	var v outlieragg.View
	if err := e.client.getJSON(ctx, statusPrefix+"/outliers", &v); err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(v)
	}
	if len(v.Endpoints) == 0 {
		fmt.Fprintf(e.stderr, "no ejected endpoints (%s reporting)\n", proxies(v.Reporters))
		return nil
	}
	now := time.Now()
	if err := e.printTable("ENDPOINT\tSERVICE\tEJECTED-BY\tDETECTORS\tSINCE", func(w io.Writer) {
		for _, ep := range v.Endpoints {
			fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\n", ep.Endpoint, ep.Service, ep.EjectedBy, ep.Clients, detectorsCell(ep.Detectors), age(now, ep.Since))
		}
	}); err != nil {
		return err
	}
	// EJECTED-BY counts proxies whose report is live; say when that is partial.
	nodes := make([]string, 0, len(v.Partial))
	for n := range v.Partial {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		fmt.Fprintf(e.stdout, "%s: its report lists only part of its %d ejections\n", n, v.Partial[n])
	}
	return nil
}

// detectorsCell is "name=count" per detector, most first.
func detectorsCell(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.Itoa(m[n])
	}
	return strings.Join(parts, ",")
}

func proxies(n int) string {
	if n == 1 {
		return "1 proxy"
	}
	return strconv.Itoa(n) + " proxies"
}
