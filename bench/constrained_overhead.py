#!/usr/bin/env python3
"""What a JSON Schema constraint costs end to end: `deepinfer bench --concurrency N` with and
without `--json-schema`, alternated in one run on the same binary, model and prompts.

  python3 bench/constrained_overhead.py -m MODEL [--streams 1,16] [--reps 3] [--gen-len 128]
      [--schema FILE] [--threads T] [--deepinfer build/deepinfer]

The default schema (an array of at least 40 small objects, string lengths bounded) keeps every
request generating its full --gen-len under the constraint, so both runs produce the same number
of tokens and output tokens per second compare directly. Prints, per stream count, the medians
of output tok/s and output tokens per CPU-second (steadier than wall time on a shared machine),
and the constrained run's cost as a share of the unconstrained one (the issue's goal: at most 2%).
The grammar is compiled once per run before the clock starts, as a server's grammar cache does;
the mask cache starts cold in every run, so its first uses are part of the figure.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--schema", help="JSON Schema file (default: the built-in array schema)")
    ap.add_argument("--deepinfer", default=str(Path(__file__).resolve().parents[1] / "build" / "deepinfer"))
    a = ap.parse_args()
    schema = a.schema
    if not schema:
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(SCHEMA, f)
        f.close()
        schema = f.name
    print(f"{'streams':>7} {'tokens':>7} {'tok/s off':>10} {'tok/s on':>9} {'cost':>7} "
          f"{'tok/cpu-s off':>14} {'on':>7} {'cost':>7}")
    for n in [int(x) for x in a.streams.split(",")]:
        res = {False: [], True: []}
        for r in range(a.reps):
            for con in ((False, True) if r % 2 == 0 else (True, False)):
                res[con].append(run(a.deepinfer, a.model, n, a.gen_len, a.threads, schema if con else None, 1 + r))
        toks = {c: [x["output_tokens"] for x in v] for c, v in res.items()}
        if toks[False] != toks[True]:
            print(f"  note: token counts differ (off {toks[False]}, on {toks[True]}): a request ended early")
        med = {c: (statistics.median(x["output_tok_s"] for x in v), statistics.median(x["output_tok_per_cpu_s"] for x in v))
               for c, v in res.items()}
        cost_w = 1 - med[True][0] / med[False][0]
        cost_c = 1 - med[True][1] / med[False][1]
        print(f"{n:>7} {toks[True][0]:>7} {med[False][0]:>10.1f} {med[True][0]:>9.1f} {100 * cost_w:>6.1f}% "
              f"{med[False][1]:>14.1f} {med[True][1]:>7.1f} {100 * cost_c:>6.1f}%")


if __name__ == "__main__":
    main()
