#!/usr/bin/env python3
"""What a JSON Schema constraint costs end to end: `deepinfer bench --concurrency N` with and
without `--json-schema`, alternated in pairs in one run on the same binary, model and prompts.

  python3 bench/constrained_overhead.py -m MODEL [--streams 1,16] [--pairs 8] [--gen-len 256]
      [--schema FILE] [--threads T] [--deepinfer build/deepinfer] [--json]

Each pair is one unconstrained and one constrained run on the same prompts (seed = pair index),
its order alternating from pair to pair so a drift in the host's load falls on both sides. The
cost of a pair is 1 - on/off of output tok/s (wall) and on/off - 1 of CPU seconds per output
token (user + system of the bench process over the generation, engine threads included: far
steadier than wall time on a shared host). Printed per stream count: the median of the pairs'
costs with their interquartile range and min/max, and the medians of the raw figures. Last,
the direct figure (binaries that report it): the share of the engine's step time the constrained
runs spent inside the constraint (masks, accepts; `deepinfer bench`'s constraint_fraction), which
compares within one run and so barely moves with the host's load; it leaves out what the mask
changes elsewhere (a masked argmax reads less of the row; a forced token skips it). The issue's
goal is a cost of at most 2%.

The default schema (an array of at least 40 small objects, string lengths bounded) keeps every
request generating its full --gen-len under the constraint (EOS is ignored in both runs), so both
runs produce the same number of tokens; the script stops if they do not, since per-token rates
would then not compare. The grammar is compiled once per run before the clock starts, as a
server's grammar cache does; the mask cache starts cold in every run, so its first uses are part
of the figure.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA = {"type": "array", "minItems": 40,
          "items": {"type": "object", "additionalProperties": False, "required": ["name", "n"],
                    "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}}}}


def run(bin_, model, streams, gen, threads, schema, seed):
    cmd = [bin_, "bench", "-m", model, "--concurrency", str(streams), "--requests", str(max(streams, 4)),
           "--prompt-len", "32", "--gen-len", str(gen), "--seed", str(seed), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    if schema:
        cmd += ["--json-schema", schema]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def quartiles(v):
    """(q1, median, q3) of v (the median of each half for q1/q3, inclusive of the middle)."""
    s = sorted(v)
    if len(s) < 4:
        return s[0], statistics.median(s), s[-1]
    q = statistics.quantiles(s, n=4, method="inclusive")
    return q[0], q[1], q[2]


def pct(x):
    return f"{100 * x:+.2f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--pairs", "--reps", dest="pairs", type=int, default=8,
                    help="alternated unconstrained/constrained pairs per stream count (--reps: the old name)")
    ap.add_argument("--gen-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--schema", help="JSON Schema file (default: the built-in array schema)")
    ap.add_argument("--deepinfer", default=str(Path(__file__).resolve().parents[1] / "build" / "deepinfer"))
    ap.add_argument("--json", action="store_true", help="also one JSON line per stream count")
    a = ap.parse_args()
    if a.pairs < 1:
        sys.exit("--pairs must be >= 1")
    schema = a.schema
    if not schema:
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(SCHEMA, f)
        f.close()
        schema = f.name
    print(f"{'streams':>7} {'tokens':>7} {'pairs':>5} | {'tok/s off':>9} {'on':>7} {'cost':>7} {'IQR':>17} "
          f"{'min..max':>17} | {'cpu-ms/tok off':>14} {'on':>6} {'cost':>7} {'IQR':>17} {'min..max':>17} | "
          f"{'in constraint':>13} {'min..max':>15}")
    for n in [int(x) for x in a.streams.split(",")]:
        pairs = []
        for r in range(a.pairs):
            res = {}
            for con in ((False, True) if r % 2 == 0 else (True, False)):
                res[con] = run(a.deepinfer, a.model, n, a.gen_len, a.threads, schema if con else None, 1 + r)
            off, on = res[False], res[True]
            if off["output_tokens"] != on["output_tokens"]:
                sys.exit(f"pair {r + 1} at {n} streams: {off['output_tokens']} tokens unconstrained, "
                         f"{on['output_tokens']} constrained (a constrained request ended early: "
                         "lower --gen-len or give a schema that cannot complete); per-token rates would not compare")
            pairs.append((off, on))
        toks = pairs[0][0]["output_tokens"]
        wall = [1 - on["output_tok_s"] / off["output_tok_s"] for off, on in pairs]
        cpu = [on["cpu_seconds"] / off["cpu_seconds"] - 1 for off, on in pairs]
        w1, wm, w3 = quartiles(wall)
        c1, cm, c3 = quartiles(cpu)
        share = [on["constraint_fraction"] for _, on in pairs if "constraint_fraction" in on]
        sh = (statistics.median(share), min(share), max(share)) if share else None
        tps = {c: statistics.median(p[c]["output_tok_s"] for p in pairs) for c in (0, 1)}
        cpt = {c: statistics.median(1e3 * p[c]["cpu_seconds"] / p[c]["output_tokens"] for p in pairs) for c in (0, 1)}
        print(f"{n:>7} {toks:>7} {a.pairs:>5} | {tps[0]:>9.1f} {tps[1]:>7.1f} {pct(wm):>7} {pct(w1):>8}..{pct(w3):<7} "
              f"{pct(min(wall)):>8}..{pct(max(wall)):<7} | {cpt[0]:>14.3f} {cpt[1]:>6.3f} {pct(cm):>7} "
              f"{pct(c1):>8}..{pct(c3):<7} {pct(min(cpu)):>8}..{pct(max(cpu)):<7} | "
              + (f"{100 * sh[0]:>12.2f}% {100 * sh[1]:>6.2f}%..{100 * sh[2]:.2f}%" if sh else f"{'n/a':>13}"), flush=True)
        if a.json:
            print(json.dumps({"streams": n, "pairs": a.pairs, "gen_len": a.gen_len, "output_tokens": toks,
                              "wall_cost": {"median": wm, "q1": w1, "q3": w3, "min": min(wall), "max": max(wall)},
                              "cpu_cost": {"median": cm, "q1": c1, "q3": c3, "min": min(cpu), "max": max(cpu)},
                              "constraint_share": ({"median": sh[0], "min": sh[1], "max": sh[2]} if sh else None),
                              "tok_s": {"off": tps[0], "on": tps[1]}, "cpu_ms_per_token": {"off": cpt[0], "on": cpt[1]}}),
                  flush=True)


if __name__ == "__main__":
    main()
