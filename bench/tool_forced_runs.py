"""Forced tool calls with and without forced-run drafting (spec.c: forced_run), side by side on
one server: tool_choice required with temperature 0.8 and a fixed seed, requests alternating
"speculative": false / true, the same reply each time (checked). Reports per-request wall time
(median), completion tokens, and the drafted / accepted counts (forced runs, all accepted, plus
whatever the n-gram drafter proposed where the constraint left a choice).

    python bench/tool_forced_runs.py -m MODEL_DIR_OR_GGUF [--reps 10] [--threads 2]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
import openai  # noqa: E402

from server_util import API_KEY, Server, deepinfer_bin  # noqa: E402
from test_server_structured import TOOLS, WEATHER  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    s = Server([str(deepinfer_bin()), "serve", "-m", a.model, "--port", "0", "--api-key", API_KEY,
                "--served-model-name", "m", "--ctx", "1024", "--threads", str(a.threads), "--quiet",
                "--spec", "ngram"])
    c = openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0)
    kw = dict(model="m", messages=WEATHER, tools=TOOLS, tool_choice="required", max_tokens=160, temperature=0.8,
              seed=4, parallel_tool_calls=False)
    times = {False: [], True: []}
    replies, drafted, accepted, tokens = set(), 0, 0, 0
    try:
        for rep in range(a.reps + 1):
            for spec in (False, True) if rep % 2 else (True, False):
                t = time.perf_counter()
                r = c.chat.completions.create(**kw, extra_body={"speculative": spec})
                dt = time.perf_counter() - t
                replies.add(tuple((x.function.name, x.function.arguments) for x in r.choices[0].message.tool_calls))
                if rep == 0:
                    continue  # warm-up round
                times[spec].append(dt)
                if spec:
                    sp = r.usage.model_extra.get("speculative") or {}
                    drafted, accepted = sp.get("draft_tokens", 0), sp.get("accepted_tokens", 0)
                    tokens = r.usage.completion_tokens
    finally:
        s.stop()
    assert len(replies) == 1, replies
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"model {a.model}: reply {replies.pop()}")
    print(f"completion tokens {tokens}, drafted {drafted}, accepted {accepted} (forced runs and n-gram drafts)")
    print(f"median per request: off {off * 1000:.1f} ms, forced runs drafted {on * 1000:.1f} ms, {off / on:.2f}x")


if __name__ == "__main__":
    main()
