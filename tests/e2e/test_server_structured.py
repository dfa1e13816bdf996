"""Structured output through the server on SmolLM2-135M-Instruct, with the
official `openai` client: response_format json_schema (20 schemas, 50
sampled outputs, every one validated with Python `jsonschema`) and
json_object, the extension fields `regex` and `grammar` on both endpoints,
n > 1 (one matcher fork per completion), streaming, the 400 answers that
name the field, speculative decoding on vs. off (identical constrained
outputs), and `deepinfer batch` reading the same fields. One server with
`--spec ngram --spec-mode always`; requests opt out with "speculative": false."""
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from server_util import API_KEY, MODEL, MODEL_NAME, deepinfer_bin, start_real

# Schemas whose instances end within a few dozen tokens: bounded strings,
# integers in ranges, short arrays, enums; so every output must validate
# (none may be cut by max_tokens).
S = lambda n: {"type": "string", "maxLength": n}  # noqa: E731
SCHEMAS = [
    {"type": "object", "properties": {"name": S(12), "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
     "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"city": S(10), "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
     "required": ["city", "zip"], "additionalProperties": False},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}, "required": ["when"],
     "additionalProperties": False},
    {"enum": ["yes", "no", "maybe"]},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"],
     "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": S(6), "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 999}, {"type": "boolean"}]},
    {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "integer", "minimum": -50, "maximum": 50},
                                      "y": {"type": "integer", "minimum": -50, "maximum": 50}},
     "required": ["kind", "x", "y"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"first": S(8), "last": S(8)},
                                               "required": ["first", "last"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
    {"type": "string", "pattern": "^[A-Z][a-z]{2,8}$"},
    {"type": "object", "properties": {"score": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}},
     "required": ["score"], "additionalProperties": False},
    {"type": "object", "properties": {"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"}},
     "required": ["email"], "additionalProperties": False},
    {"$defs": {"p": {"type": "object", "properties": {"n": S(5)}, "required": ["n"], "additionalProperties": False}},
     "type": "array", "items": {"$ref": "#/$defs/p"}, "maxItems": 2},
    {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": ["integer", "null"], "minimum": 0,
                                                                   "maximum": 9}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}, "required": ["ip"],
     "additionalProperties": False},
    {"type": "object", "properties": {"t": {"type": "string", "format": "time"}}, "required": ["t"],
     "additionalProperties": False},
    {"type": "object", "properties": {"lang": {"enum": ["c", "python", "rust"]}, "stars": {"type": "integer",
                                                                                       "minimum": 0, "maximum": 5}},
     "required": ["lang", "stars"], "additionalProperties": False},
]
ASK = [{"role": "user", "content": "Reply with JSON only. Describe something briefly."}]


@pytest.fixture(scope="module")
def srv():
    s = start_real("--max-seqs", "16", "--max-queue", "64", "--spec", "ngram", "--spec-mode", "always")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def rf(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_fifty_outputs_for_twenty_schemas_validate(client):
    # 10 schemas x 3 + 10 x 2 = 50 sampled outputs, all requests at once
    def one(i):
        n = 3 if i < 10 else 2
        r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=96, temperature=1.0,
                                           seed=100 + i, n=n, response_format=rf(SCHEMAS[i], f"s{i}"),
                                           extra_body={"json_whitespace": "compact"})
        return i, r

    with ThreadPoolExecutor(20) as ex:
        results = list(ex.map(one, range(len(SCHEMAS))))
    count = 0
    for i, r in results:
        assert len(r.choices) == (3 if i < 10 else 2)
        assert sorted(c.index for c in r.choices) == list(range(len(r.choices)))
        for c in r.choices:
            assert c.finish_reason == "stop", (i, c.message.content)
            jsonschema.validate(json.loads(c.message.content), SCHEMAS[i],
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            count += 1
    assert count == 50


def test_forks_differ_and_seed_repeats(client):
    kw = dict(model=MODEL_NAME, messages=ASK, max_tokens=60, temperature=1.0, seed=7, n=4,
              response_format=rf(SCHEMAS[0]))
    a = [c.message.content for c in client.chat.completions.create(**kw).choices]
    b = [c.message.content for c in client.chat.completions.create(**kw).choices]
    assert a == b  # seeded: the same four outputs again
    assert len(set(a)) > 1  # each fork samples its own stream


def test_json_object_and_stream(client):
    kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "A JSON object with a name."}], max_tokens=48,
              temperature=0, response_format={"type": "json_object"})
    r = client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    assert text.lstrip().startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(**kw, stream=True)
                       if ch.choices)
    assert streamed == text


def test_regex_and_grammar_on_completions(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Today's date is", max_tokens=16, temperature=0,
                                  extra_body={"regex": " [0-9]{4}-[0-9]{2}-[0-9]{2}"})
    assert re.fullmatch(r" [0-9]{4}-[0-9]{2}-[0-9]{2}", r.choices[0].text) and r.choices[0].finish_reason == "stop"
    r = client.completions.create(model=MODEL_NAME, prompt="Is water wet? Answer:", max_tokens=8, temperature=1.0,
                                  n=3, seed=3, extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
    assert len(r.choices) == 3
    assert all(c.text in (" yes.", " no.") and c.finish_reason == "stop" for c in r.choices)
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=8, temperature=0,
                                       extra_body={"regex": "(cat|dog)s?"})
    assert re.fullmatch("(cat|dog)s?", r.choices[0].message.content)


@pytest.mark.parametrize("extra,param", [
    ({"grammar": "root ::= ("}, "grammar"),
    ({"regex": "(?=a)b"}, "regex"),
    ({"regex": "a", "grammar": 'root ::= "a"'}, "regex"),
    ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "grammar"),
    ({"response_format": rf({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema.name"),
])
def test_bad_constraints_are_400_naming_the_field(client, extra, param):
    for call in (lambda: client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4, extra_body=extra),
                 lambda: client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=4, extra_body=extra)):
        with pytest.raises(openai.BadRequestError) as ei:
            call()
        assert ei.value.body["param"] == param, ei.value.body


def test_speculative_on_and_off_identical(client):
    # a prompt full of the JSON it will write, so prompt lookup drafts a lot
    prompt = [{"role": "user", "content": 'Copy this JSON exactly: {"name": "Ada", "age": 36}. '
                                          'Again: {"name": "Ada", "age": 36}'}]
    drafted = 0
    for temp, seed in ((0, 0), (0.8, 11), (1.0, 12)):
        outs = []
        for spec in (True, False):
            r = client.chat.completions.create(model=MODEL_NAME, messages=prompt, max_tokens=40, temperature=temp,
                                               seed=seed, response_format=rf(SCHEMAS[0]),
                                               extra_body={"speculative": spec, "json_whitespace": "python"})
            outs.append(r.choices[0].message.content)
            if spec:
                drafted += ((r.usage.model_extra or {}).get("speculative") or {}).get("draft_tokens", 0)
        assert outs[0] == outs[1]
        jsonschema.validate(json.loads(outs[0]), SCHEMAS[0])
    assert drafted > 0  # speculation did run under the constraint


def test_batch_reads_the_same_fields(tmp_path):
    if not MODEL.exists() or not deepinfer_bin().exists():
        pytest.skip("model or binary absent")
    lines = [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": ASK, "max_tokens": 60, "temperature": 0, "response_format": rf(SCHEMAS[0])}},
        {"custom_id": "b", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "The year was", "max_tokens": 8, "temperature": 0, "regex": " [0-9]{4}"}},
        {"custom_id": "c", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "x", "max_tokens": 8, "regex": "(?=a)"}},
    ]
    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([str(deepinfer_bin()), "batch", "-m", str(MODEL), "-i", str(inp), "-o", str(outp), "-q",
                        "--ctx", "512"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = {x["custom_id"]: x for x in map(json.loads, outp.read_text().splitlines())}
    a = res["a"]["response"]["body"]["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(a), SCHEMAS[0])
    assert re.fullmatch(r" [0-9]{4}", res["b"]["response"]["body"]["choices"][0]["text"])
    assert res["c"]["error"] and "regex" in json.dumps(res["c"]["error"])


# ---- tools (SmolLM2's template ignores `tools`: the server describes them in
# a system message, Hermes-style, and parses <tool_call> blocks back) ----

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                        "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                                        "b": {"type": "integer", "minimum": 0, "maximum": 999}},
                       "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(calls, names=PARAMS):
    assert calls
    for tc in calls:
        assert tc.type == "function" and tc.id.startswith("call_")
        assert tc.function.name in names
        jsonschema.validate(json.loads(tc.function.arguments), PARAMS[tc.function.name])


def streamed_calls(stream):
    """Joins delta.tool_calls fragments by index, as OpenAI clients do."""
    calls, content, finish = {}, "", None
    for ch in stream:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


@pytest.mark.parametrize("choice,names", [("required", PARAMS),
                                          ({"type": "function", "function": {"name": "add"}}, {"add"})])
def test_forced_tool_calls_validate_streamed_and_not(client, choice, names):
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice=choice, max_tokens=60, temperature=0,
              parallel_tool_calls=False)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    check_calls(c.message.tool_calls, names)
    assert len(c.message.tool_calls) == 1  # parallel_tool_calls false: one call
    calls, content, finish = streamed_calls(client.chat.completions.create(**kw, stream=True))
    assert finish == "tool_calls" and content == ""
    assert [(x["name"], x["arguments"]) for x in calls] == \
        [(t.function.name, t.function.arguments) for t in c.message.tool_calls]


def test_streamed_tool_call_fragments_have_openai_shape(client):
    """The first fragment of a call carries index, id, type and the name; the arguments follow as
    pieces while they are generated (more than one chunk), which join into JSON that validates."""
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
              max_tokens=60, temperature=0, stream=True)
    frags = [tc for ch in client.chat.completions.create(**kw) if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    first, rest = frags[0], frags[1:]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather"
    assert len(rest) >= 3 and all(f.index == 0 and f.id is None and f.function.name is None for f in rest)
    args = "".join(f.function.arguments or "" for f in frags)
    jsonschema.validate(json.loads(args), PARAMS["get_weather"])


def test_required_sampled_n(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice="required",
                                       max_tokens=120, temperature=0.9, seed=5, n=3)
    assert len(r.choices) == 3
    for c in r.choices:
        assert c.finish_reason == "tool_calls"
        check_calls(c.message.tool_calls)
        assert len({t.id for t in c.message.tool_calls}) == len(c.message.tool_calls)


def test_auto_parses_calls_and_text(client):
    # tool_choice auto only parses; a grammar makes the reply a known call after some text
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 40}}\n</tool_call>'
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, max_tokens=60, temperature=0,
              extra_body={"grammar": 'root ::= "Let me add.\\n" "' + call.replace('"', '\\"').replace("\n", "\\n") + '"'})
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content == "Let me add."
    assert [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls] == [("add", {"a": 2, "b": 40})]
    calls, content, finish = streamed_calls(client.chat.completions.create(**kw, stream=True))
    assert (content, finish) == ("Let me add.", "tool_calls")
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("add", {"a": 2, "b": 40})]
    # plain text stays content; tool_choice none never parses
    r = client.chat.completions.create(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice="none",
                                       max_tokens=16, temperature=0, extra_body={"grammar": 'root ::= "<tool_call>x"'})
    assert r.choices[0].message.content == "<tool_call>x" and not r.choices[0].message.tool_calls


def test_auto_strict_constrains_a_call_the_model_opens(client):
    """tool_choice auto with strict tools: text stays free, and once the model writes <tool_call>
    (nudged here by a small logit_bias on "<") the call follows the schemas; speculative decoding
    on (the server's default here) and off give the same reply."""
    strict = [dict(t, function=dict(t["function"], strict=True)) for t in TOOLS]
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=strict, max_tokens=60, temperature=0, logit_bias={"44": 5},
              parallel_tool_calls=False)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    check_calls(c.message.tool_calls)
    off = client.chat.completions.create(**kw, extra_body={"speculative": False}).choices[0]
    assert (off.message.content, [(t.function.name, t.function.arguments) for t in off.message.tool_calls]) == \
        (c.message.content, [(t.function.name, t.function.arguments) for t in c.message.tool_calls])


def test_batch_tool_calls_match_the_server(client, tmp_path):
    """`deepinfer batch` renders, forces and parses tool calls as the server does: the same calls
    for the same greedy lines (named, required, auto with a strict tool), and the same 400s."""
    strict = [dict(t, function=dict(t["function"], strict=True)) for t in TOOLS]
    bodies = {
        "named": dict(messages=WEATHER, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                      max_tokens=60, temperature=0),
        "required": dict(messages=WEATHER, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0,
                         parallel_tool_calls=False),
        "auto": dict(messages=WEATHER, tools=strict, max_tokens=60, temperature=0, logit_bias={"44": 5},
                     parallel_tool_calls=False),
        "bad": dict(messages=WEATHER, tools=TOOLS, tool_choice="required", n=2, max_tokens=8),
    }
    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"custom_id": k, "method": "POST", "url": "/v1/chat/completions",
                                       "body": dict(b, model=MODEL_NAME)}) + "\n" for k, b in bodies.items()))
    r = subprocess.run([str(deepinfer_bin()), "batch", "-m", str(MODEL), "-i", str(inp), "-o", str(outp), "-q",
                        "--ctx", "1024", "--served-model-name", MODEL_NAME], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    res = {x["custom_id"]: x for x in map(json.loads, outp.read_text().splitlines())}
    assert res["bad"]["error"]["param"] == "n"
    for k in ("named", "required", "auto"):
        got = res[k]["response"]["body"]["choices"][0]
        want = client.chat.completions.create(model=MODEL_NAME, extra_body={"speculative": False},
                                              **bodies[k]).choices[0]
        calls = [(t["function"]["name"], t["function"]["arguments"]) for t in got["message"]["tool_calls"]]
        assert calls == [(t.function.name, t.function.arguments) for t in want.message.tool_calls], k
        assert (got["message"]["content"], got["finish_reason"]) == (want.message.content, want.finish_reason), k
        for name, args in calls:
            jsonschema.validate(json.loads(args), PARAMS[name])


@pytest.mark.parametrize("kw,param", [
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
    (dict(tool_choice="required"), "tool_choice"),
    (dict(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), "tool_choice"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]), "tools"),
    (dict(tools=[{"type": "function", "function": {"name": "f" * 129}}]), "tools"),
])
def test_bad_tools_are_400(client, kw, param):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL_NAME, messages=WEATHER, max_tokens=4, **kw)
    assert ei.value.body["param"] == param, ei.value.body
