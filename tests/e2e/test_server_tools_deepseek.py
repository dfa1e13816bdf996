"""Tool calls in DeepSeek's own format, through the server and the `openai` client, on the tiny
DeepSeek-V3 with DeepSeek-V3.1's tokenizer and chat template (server/toolcon.c): with
tool_choice required or named the reply is forced into <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>
NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>, each tag its own token and the
arguments under the function's parameters schema, so even random weights give calls that
validate; streamed and whole answers agree; the same model with an R1-style template (fenced
```json arguments after function<｜tool▁sep｜>NAME) gets that format. With tool_choice auto and strict tools a call the
model opens is constrained (test_server_structured has the same on SmolLM2's Hermes text tags,
with speculative decoding on and off). With speculative decoding on, forced runs are drafted and
all accepted."""
import json
import shutil

import jsonschema
import openai
import pytest

from server_util import API_KEY, MODEL_NAME, Server, deepinfer_bin, start_real
from test_deepseek_engine import v3  # noqa: F401  (the fixture that builds the model directory)
from test_server_structured import PARAMS, TOOLS, WEATHER, check_calls, streamed_calls


@pytest.fixture(scope="module")
def ds_client(v3):  # noqa: F811
    if not deepinfer_bin().exists():
        pytest.skip("deepinfer not built")
    s = Server([str(deepinfer_bin()), "serve", "-m", str(v3), "--port", "0", "--api-key", API_KEY,
                "--served-model-name", "ds", "--ctx", "512", "--max-seqs", "4", "--threads", "2", "--quiet",
                "--spec", "ngram"])
    yield openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0)
    s.stop()


@pytest.mark.parametrize("choice,names", [("required", PARAMS),
                                          ({"type": "function", "function": {"name": "add"}}, {"add"})])
def test_deepseek_forced_calls_validate_streamed_and_not(ds_client, choice, names):
    kw = dict(model="ds", messages=WEATHER, tools=TOOLS, tool_choice=choice, max_tokens=80, temperature=0.7,
              seed=11, extra_body={"speculative": False})
    r = ds_client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    check_calls(c.message.tool_calls, names)
    calls, content, finish = streamed_calls(ds_client.chat.completions.create(**kw, stream=True))
    assert finish == "tool_calls" and content == ""
    assert [(x["name"], x["arguments"]) for x in calls] == \
        [(t.function.name, t.function.arguments) for t in c.message.tool_calls]


def test_deepseek_forced_calls_are_the_format_tokens(ds_client):
    """The reply's tokens: the tags are DeepSeek's added tokens, not spelled out."""
    r = ds_client.chat.completions.create(model="ds", messages=WEATHER, tools=TOOLS, tool_choice="required",
                                          max_tokens=80, temperature=0, logprobs=True,
                                          extra_body={"speculative": False})
    toks = [t.token for t in r.choices[0].logprobs.content]
    assert toks[:2] == ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"], toks
    assert "<｜tool▁sep｜>" in toks and toks[-1] == "<｜tool▁calls▁end｜>", toks
    check_calls(r.choices[0].message.tool_calls)


def test_deepseek_sampled_n_parallel(ds_client):
    r = ds_client.chat.completions.create(model="ds", messages=WEATHER, tools=TOOLS, tool_choice="required",
                                          max_tokens=160, temperature=1.0, seed=3, n=3)
    for c in r.choices:
        assert c.finish_reason == "tool_calls"
        check_calls(c.message.tool_calls)
        assert len(c.message.tool_calls) <= len(TOOLS)


def test_forced_runs_are_drafted_and_all_accepted(ds_client):
    """With speculative decoding on, the tokens the constraint leaves no choice over (the tags, the
    fixed stretches of the schema) are drafted as they are and every one is accepted (the n-gram
    drafter finds nothing to propose in this random model's reply, so every draft here is a forced
    run); the reply is the one without speculation (sampled, seeded)."""
    kw = dict(model="ds", messages=WEATHER, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0.8,
              seed=4)
    off = ds_client.chat.completions.create(**kw, extra_body={"speculative": False})
    on = ds_client.chat.completions.create(**kw)
    spec = on.usage.model_extra["speculative"]
    assert spec["draft_tokens"] >= 6 and spec["accepted_tokens"] == spec["draft_tokens"], spec
    check_calls(on.choices[0].message.tool_calls)
    assert [(t.function.name, t.function.arguments) for t in on.choices[0].message.tool_calls] == \
        [(t.function.name, t.function.arguments) for t in off.choices[0].message.tool_calls]


@pytest.fixture(scope="module")
def r1_client(v3, tmp_path_factory):  # noqa: F811
    """The same model with the V3/R1 way of writing calls in its template (function<｜tool▁sep｜>NAME
    and the arguments fenced as ```json), so the server detects that format."""
    d = tmp_path_factory.mktemp("r1")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        (d / f).symlink_to((v3 / f).resolve())
    cfg = json.loads((v3 / "tokenizer_config.json").read_text())
    v31 = "tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments']"
    assert v31 in cfg["chat_template"]
    cfg["chat_template"] = cfg["chat_template"].replace(
        v31, "'function<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json\\n' + tool['function']['arguments'] "
             "+ '\\n```'")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    s = Server([str(deepinfer_bin()), "serve", "-m", str(d), "--port", "0", "--api-key", API_KEY,
                "--served-model-name", "ds", "--ctx", "512", "--threads", "2", "--quiet"])
    yield openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0)
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_deepseek_r1_format_forced_and_streamed(r1_client):
    kw = dict(model="ds", messages=WEATHER, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
              max_tokens=80, temperature=0, logprobs=True)
    r = r1_client.chat.completions.create(**kw)
    text = "".join(t.token for t in r.choices[0].logprobs.content)
    call = r.choices[0].message.tool_calls[0]
    assert text == ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                    + call.function.arguments + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"), text
    check_calls([call], {"get_weather"})
    kw.pop("logprobs")
    calls, content, finish = streamed_calls(r1_client.chat.completions.create(**kw, stream=True))
    assert (content, finish) == ("", "tool_calls")
    assert [(x["name"], x["arguments"]) for x in calls] == [(call.function.name, call.function.arguments)]


STRICT = [dict(t, function=dict(t["function"], strict=True)) for t in TOOLS]
CALLS_BEGIN = "128806"  # <｜tool▁calls▁begin｜> in DeepSeek-V3's vocabulary


def test_deepseek_auto_strict_constrains_an_opened_call(ds_client):
    """tool_choice auto: text is free until the model writes <｜tool▁calls▁begin｜> (pushed here with
    logit_bias, the weights being random); from there the call follows the format and the schema,
    then text is free again (parallel_tool_calls false: no second constrained call)."""
    kw = dict(model="ds", messages=WEATHER, max_tokens=60, temperature=0, logit_bias={CALLS_BEGIN: 100},
              parallel_tool_calls=False)
    r = ds_client.chat.completions.create(tools=STRICT, **kw)
    calls = r.choices[0].message.tool_calls
    check_calls(calls[:1])
    streamed, _, _ = streamed_calls(ds_client.chat.completions.create(tools=STRICT, stream=True, **kw))
    assert (streamed[0]["name"], streamed[0]["arguments"]) == (calls[0].function.name, calls[0].function.arguments)
    # not strict: the same opening is only parsed, and random weights write no valid call
    r = ds_client.chat.completions.create(tools=TOOLS, **kw)
    calls = r.choices[0].message.tool_calls or []
    assert not any(c.function.name in PARAMS for c in calls), calls
