#!/usr/bin/env python3
"""Renders tools/bench/proxy/run.sh's results: a per-round table and medians.

Input: the TSV run.sh writes, one line per round and target:
round target p50_ms p90_ms p99_ms cpu_us_per_req_fixed max_rps cpu_us_per_req_max
rss_kb errors loadavg. Ratios are taken within a round (the machine is shared, so
absolute numbers drift between rounds; same-round ratios much less), then the
median over rounds is quoted. Run it again on a kept TSV (run.sh KEEP_RESULTS=FILE)
to re-render without measuring.
"""
import argparse
import statistics as st
import sys

COLS = dict(p50=2, p90=3, p99=4, cpu=5, rps=6, cpumax=7, rss=8, errs=9, load=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("--qps", default="2000")
    ap.add_argument("--conns", default="32")
    ap.add_argument("--wrk-conns", default="64")
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--host", default="bench:9080")
    ap.add_argument("--godebug", default="")
    ap.add_argument("--idle-sidecar-kb", type=int)
    ap.add_argument("--idle-benchproxy-kb", type=int)
    ap.add_argument("--idle-nginx-kb", type=int)
    ap.add_argument("--idlerss", default="", help="idlerss.sh's last line")
    ap.add_argument("--alt", default="", help="how sidecar-alt differs from sidecar")
    ap.add_argument("--alt2", default="", help="how sidecar-alt2 differs from sidecar")
    a = ap.parse_args()

    rows = [l.rstrip("\n").split("\t") for l in open(a.tsv) if l.strip()]
    by = {(r[0], r[1]): r for r in rows}
    rounds = sorted({r[0] for r in rows}, key=int)
    names = list(dict.fromkeys(r[1] for r in rows))
    get = lambda r, k: float(r[COLS[k]])

    print(f"fixed rate: fortio load -uniform -r 0.00001 -qps {a.qps} -c {a.conns} -t {a.duration}; "
          f"max rate: wrk -t1 -c{a.wrk_conns} -d{a.duration}; header Host: {a.host} on every target"
          + (" but sidecar-policy (Host: bench-policy:9080)" if any(r[1] == "sidecar-policy" for r in rows) else ""))
    print("sidecar = the real bin/sidecar configured by a real pilot; benchproxy* = a stand-in "
          "(the request path with a fixed Go-built config, no metrics Observer), not the product")
    print("CPU = utime+stime of the proxy's processes / requests completed; x = ratio to nginx in the "
          "same round; +pNN = the proxy's percentile minus direct's in the same round (direct: its own)")

    hdr = (f"{'target':14} {'us/req@' + a.qps:>11} {'x':>6} {'max rps':>8} {'x':>6} {'us/req@max':>10} {'x':>6} "
           f"{'+p50 ms':>8} {'+p90 ms':>8} {'+p99 ms':>8}")
    print(f"\nper round:\n{'rnd':>3} {'load':>5} " + hdr + f" {'errors':>6}")
    per = {n: {k: [] for k in ("cpu", "cpux", "rps", "rpsx", "cpumax", "cpumaxx", "p50", "p90", "p99", "rss")}
           for n in names}
    for rd in rounds:
        d, x = by.get((rd, "direct")), by.get((rd, "nginx"))
        for n in names:
            r = by.get((rd, n))
            if r is None:
                continue
            prox = n != "direct"
            P = per[n]
            P["cpu"].append(get(r, "cpu"))
            P["rps"].append(get(r, "rps"))
            P["cpumax"].append(get(r, "cpumax"))
            P["rss"].append(get(r, "rss"))
            rx = {}
            if x is not None and prox:
                for k, kx in (("cpu", "cpux"), ("rps", "rpsx"), ("cpumax", "cpumaxx")):
                    if get(x, k):
                        rx[k] = get(r, k) / get(x, k)
                        P[kx].append(rx[k])
            for k in ("p50", "p90", "p99"):
                P[k].append(get(r, k) - get(d, k) if prox and d is not None else get(r, k))
            fx = lambda k: f"{rx[k]:.2f}x" if k in rx else ""
            cpu = f"{get(r, 'cpu'):11.1f}" if prox else f"{'':11}"
            cpum = f"{get(r, 'cpumax'):10.1f}" if prox else f"{'':10}"
            print(f"{rd:>3} {r[COLS['load']]:>5} {n:14} {cpu} {fx('cpu'):>6} {get(r, 'rps'):8.0f} {fx('rps'):>6} {cpum} "
                  f"{fx('cpumax'):>6} {P['p50'][-1]:8.3f} {P['p90'][-1]:8.3f} {P['p99'][-1]:8.3f} {int(get(r, 'errs')):6d}")

    med = lambda l: st.median(l) if l else None
    fm = lambda v, f: format(v, f) if v is not None else ""
    print(f"\nmedians of {len(rounds)} rounds (ratios: median of the same-round ratios):")
    print(hdr + f" {'RSS MiB':>8}")
    for n in names:
        P = per[n]
        prox = n != "direct"
        mx = lambda k: f"{med(P[k]):.2f}x" if P[k] else ""
        print(f"{n:14} {fm(med(P['cpu']) if prox else None, '11.1f'):>11} {mx('cpux'):>6} {med(P['rps']):8.0f} "
              f"{mx('rpsx'):>6} {fm(med(P['cpumax']) if prox else None, '10.1f'):>10} {mx('cpumaxx'):>6} "
              f"{med(P['p50']):8.3f} {med(P['p90']):8.3f} {med(P['p99']):8.3f} "
              f"{fm(max(P['rss']) / 1024 if prox else None, '8.1f'):>8}")

    g = lambda ok: "met" if ok else "MISSED"
    print()
    for n in ("sidecar", "sidecar-alt", "sidecar-alt2"):
        P = per.get(n)
        if P and P["cpux"]:
            c, cm, rp = med(P["cpux"]), med(P["cpumaxx"]), med(P["rpsx"])
            # The spread of the same-round ratios says how far one round is to be trusted.
            sp = lambda k: f"{min(P[k]):.2f}-{max(P[k]):.2f}"
            print(f"goals, {n} vs nginx (medians): CPU/req at {a.qps} rps {c:.2f}x (<= 1.0x: {g(c <= 1.0)}); "
                  f"at saturation {cm:.2f}x (<= 1.0x: {g(cm <= 1.0)}); max rps {rp:.2f}x (>= 0.9x: {g(rp >= 0.9)}); "
                  f"rounds' range {sp('cpux')}, {sp('cpumaxx')}, {sp('rpsx')}")
    # Same-round ratios of any two rows: a over b, medians and each round's.
    def same_round(a_, b_, k):
        return [get(by[(rd, a_)], k) / get(by[(rd, b_)], k) for rd in rounds
                if (rd, a_) in by and (rd, b_) in by and get(by[(rd, b_)], k)]
    if "nginx1" in per:
        for n in ("sidecar", "sidecar-alt", "sidecar-alt2"):
            if n in per:
                c, cm, rp = (med(same_round(n, "nginx1", k)) for k in ("cpu", "cpumax", "rps"))
                print(f"{n} vs nginx1 (one worker process; medians of same-round ratios): CPU/req at {a.qps} rps "
                      f"{c:.2f}x, at saturation {cm:.2f}x, max rps {rp:.2f}x")
    for x_, y_ in (("sidecar", "sidecar-alt"), ("sidecar", "sidecar-alt2"), ("sidecar-alt2", "sidecar-alt")):
        if x_ not in per or y_ not in per:
            continue
        for k, what in (("cpu", f"CPU/req at {a.qps} rps"), ("cpumax", "CPU/req at saturation"), ("rps", "max rps")):
            r = same_round(x_, y_, k)
            print(f"A/B {x_} / {y_} {what}: {med(r):.3f}x (rounds: {' '.join(f'{x:.3f}' for x in r)})")
    if "sidecar-policy" in per and "sidecar" in per:
        # Same process, same round: the cost of the DestinationPolicy's checks.
        rat = {k: [get(by[(rd, "sidecar-policy")], k) / get(by[(rd, "sidecar")], k) for rd in rounds
                   if (rd, "sidecar-policy") in by and (rd, "sidecar") in by and get(by[(rd, "sidecar")], k)]
               for k in ("cpu", "cpumax", "rps")}
        c, cm, rp = med(rat["cpu"]), med(rat["cpumax"]), med(rat["rps"])
        if c is not None:
            print(f"goal, sidecar-policy vs sidecar (same process; medians of same-round ratios): CPU/req at {a.qps} rps "
                  f"{c:.3f}x (<= 1.05x: {g(c <= 1.05)}); at saturation {cm:.3f}x (<= 1.05x: {g(cm <= 1.05)}); "
                  f"max rps {rp:.3f}x")
        print("sidecar-policy = Host bench-policy:9080 on the same sidecar: DestinationPolicy with circuit breaking, "
              "retry budget, all five outlier detectors, local rate limit (none tripping) and Route retries")
    if "sidecar-alt" in per:
        print(f"sidecar-alt = the real sidecar with {a.alt or '(nothing different)'}")
    if "sidecar-alt2" in per:
        print(f"sidecar-alt2 = the real sidecar with {a.alt2 or '(nothing different)'}")
    # The pair rows (issue #9): CPU per sidecar is half the pair's; the -alt pair is
    # read against its base row as medians of same-round ratios.
    for base in ("sidecar-pair", "sidecar-pair-mtls"):
        for n in (base, base + "-alt"):
            if per.get(n) and per[n]["cpu"]:
                c = med(per[n]["cpu"]) / 2
                print(f"goal, {n}: CPU/req per sidecar at {a.qps} rps {c:.1f} us (<= 100: {g(c <= 100)})")
        alt = base + "-alt"
        rat = [get(by[(rd, alt)], "cpu") / get(by[(rd, base)], "cpu") for rd in rounds
               if (rd, alt) in by and (rd, base) in by and get(by[(rd, base)], "cpu")]
        if rat:
            print(f"{alt} / {base} CPU/req at {a.qps} rps (median of same-round ratios): {med(rat):.3f}x "
                  f"(rounds: {' '.join(f'{x:.3f}' for x in rat)}); alt = {a.alt or '(nothing different)'}")
    for sfx in ("", "-alt"):
        m, pl = "sidecar-pair-mtls" + sfx, "sidecar-pair" + sfx
        rat = [get(by[(rd, m)], "cpu") / get(by[(rd, pl)], "cpu") for rd in rounds
               if (rd, m) in by and (rd, pl) in by and get(by[(rd, pl)], "cpu")]
        if rat:
            print(f"goal, {m} / {pl} CPU/req at {a.qps} rps (median of same-round ratios): {med(rat):.3f}x "
                  f"(<= 1.25x: {g(med(rat) <= 1.25)})")
    if a.idle_sidecar_kb:
        mib = a.idle_sidecar_kb / 1024
        extra = ""
        if a.idle_benchproxy_kb:
            extra += f"; benchproxy idle {a.idle_benchproxy_kb / 1024:.1f} MiB"
        if a.idle_nginx_kb:
            extra += f"; nginx idle {a.idle_nginx_kb / 1024:.1f} MiB (master + 2 workers)"
        print(f"real sidecar idle RSS (bench config activated from pilot, before load): {mib:.1f} MiB "
              f"(<= 20 MiB: {g(mib <= 20)}){extra}")
    if a.idlerss:
        real = {k: int(v) / 1024 for k, v in (kv.split("=") for kv in a.idlerss.split())}
        r = real["idle_rss_kb"]
        print(f"bin/sidecar idle RSS (examples/ activated from a real pilot, idlerss.sh): {r:.1f} MiB = "
              f"anon {real['rss_anon_kb']:.1f} + file {real['rss_file_kb']:.1f} (<= 20 MiB: {g(r <= 20)})")
        if "steady_max_rss_kb" in real:
            print(f"bin/sidecar steady idle with /metrics scraped every 15s: highest RSS {real['steady_max_rss_kb']:.1f} MiB")
    print(f"sidecars' GODEBUG={a.godebug!r}; real sidecar --concurrency default 1 (GOMAXPROCS=1), benchproxy GOMAXPROCS 2, nginx worker_processes 2; "
          f"load average at each measurement in the per-round table")


if __name__ == "__main__":
    sys.exit(main())
