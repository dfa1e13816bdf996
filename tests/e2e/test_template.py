"""`deepinfer template` against PyPI jinja2 configured exactly as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, json.dumps tojson, raise_exception, strftime_now,
None-valued message keys dropped, reasoning fields aliased). Each case is an
edge construct; the rendered bytes must be identical, and templates that
raise must fail with the same error class.

Also: the chat templates inside the test GGUFs (SmolLM2) rendered over the
shared conversations, and the shipped templates through the CLI."""
import datetime
import json
import os
import subprocess
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("DI_SHARED_DATA", REPO.parent / "shared" / "data"))
MODELS = Path.home() / ".cache" / "deepinfer" / "models"
NOW = datetime.datetime(2025, 8, 5, 12, 0, 0)


def binary():
    return os.environ.get("DEEPINFER_BIN") or str(REPO / "build" / "deepinfer")


def jinja_render(src, messages, tools=None, add_generation_prompt=False, **kwargs):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    env.globals["namespace"] = jinja2.utils.Namespace
    msgs = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        r = next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if m.get(k) is not None), None)
        if r is not None:
            m = {"thinking": r, **m, "reasoning_content": r}
        msgs.append(m)
    return env.from_string(src).render(messages=msgs, tools=tools, documents=None,
                                       add_generation_prompt=add_generation_prompt, **kwargs)


def ours(tmp_path, src, messages, tools=None, add_generation_prompt=False, tokenizer=None, **kwargs):
    (tmp_path / "t.jinja").write_text(src, encoding="utf-8")
    (tmp_path / "m.json").write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [binary(), "template", "--messages", str(tmp_path / "m.json"), "--now", "2025-08-05T12:00:00"]
    cmd += ["--tokenizer", str(tokenizer)] if tokenizer else ["--template", str(tmp_path / "t.jinja")]
    if tools is not None:
        (tmp_path / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
        cmd += ["--tools", str(tmp_path / "tools.json")]
    if add_generation_prompt:
        cmd.append("--add-generation-prompt")
    if kwargs:
        cmd += ["--kwargs", json.dumps(kwargs)]
    return subprocess.run(cmd, capture_output=True, timeout=60)


MSGS = [
    {"role": "system", "content": "Be brief.", "extra": None},
    {"role": "user", "content": "Hi <b>&'\"\\ there\n", "name": "Zoë"},
    {"role": "assistant", "content": "  ok  ", "reasoning_content": "think…", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2.5, "c": [True, None, "x"]}}}]},
    {"role": "tool", "content": "{\"sum\": 3.5}", "tool_call_id": "call_1"},
    {"role": "user", "content": "多语言 🇫🇷 naïve\u00a0nbsp\u3000wide\u200dzwj"},
]
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number", "default": 0.1}},
    "required": ["a"]}}}]

CASES = {
    "whitespace_control": "{% for m in messages %}\n  {%- if m.role == 'user' -%}\n    [{{ m.content }}]\n  {% else %}\n    <{{ m.role }}>\n  {%- endif %}\n{% endfor %}\n   {# comment #}\n  tail  {{- ' x ' -}}  end\n{%+ if true %}kept{% endif +%}\nnext\n{% raw %}{{ not parsed }}{% endraw %}\n",
    "lstrip_trim": "a\n    {% if true %}\n    b\n    {% endif %}\n  {{ 'c' }}\n\t{# c #}\nd\n",
    "loop_vars": "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}:{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ loop.nextitem.role if not loop.last else '-' }}{{ loop.cycle('a', 'b', 'c') }};{% endfor %}",
    "loop_filter_else_break": "{% for m in messages if m.role != 'system' %}{% if loop.index > 3 %}{% break %}{% endif %}{% if m.role == 'tool' %}{% continue %}{% endif %}{{ loop.index }}{{ m.role }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
    "unpack_items": "{% for k, v in messages[2].tool_calls[0].function.arguments.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}{% for k, v in messages[0] | items %}{{ k }},{% endfor %}",
    "set_scoping": "{% set x = 1 %}{% for m in messages %}{% set x = loop.index %}{% endfor %}{{ x }}{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.s }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "loop_scoping": "{% for i in [1, 2, 3] %}{% if i > 1 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}{% set x = 'o' %}{% for i in [1, 2] %}({{ x }}){% set x = i %}{{ x }}{% endfor %}{{ x }}{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}{{ i is defined }}",
    "block_set": "{% set body %}  {{ messages[1].content }}  {% endset %}[{{ body }}]{% set up | upper %}abc{% endset %}{{ up }}",
    "macros": "{% macro tag(name, body='', close=true) %}<{{ name }}>{{ body }}{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag('c', close=false, body='y') }}{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(6) }}|{{ tag('i', messages[1].content | trim) | length }}",
    "slices_index": "{{ messages[-1].content[::-1] }}|{{ messages[1:3] | length }}|{{ messages[::-2] | map(attribute='role') | join(',') }}|{{ 'abcdef'[1:4] }}{{ 'abcdef'[-2:] }}{{ 'abcdef'[:-4] }}{{ 'abcdef'[::2] }}{{ 'abcdef'[5:1:-2] }}|{{ [1,2,3][-1] }}{{ messages[0]['content'][0] }}{{ messages[-1].content[2] }}",
    "arithmetic": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 10 - 2.5 }} {{ true + 1 }} {{ 1 ~ 2 ~ none ~ true }} {{ 100000000000000000.0 }} {{ 123456789.125 }} {{ -0.0 }} {{ 1/3 }}",
    "compare_logic": "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'x' in 'xyz' }} {{ 'q' not in ['a'] }} {{ 'role' in messages[0] }} {{ none is none }} {{ 1 == 1.0 }} {{ true == 1 }} {{ (1 and 'x') or 'y' }} {{ 0 or '' or 'z' }} {{ not messages }} {{ 'yes' if messages else 'no' }} [{{ 'x' if false }}]",
    "tests": "{% for v in [none, true, 1, 1.5, 'x', [1], {'a': 1}, undefined_thing] %}{{ v is none }}{{ v is defined }}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is boolean }}{{ v is true }}{{ v is false }};{% endfor %}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is equalto 'a' }}{{ 'AB' is upper }}{{ 'ab' is lower }}{{ 2 is gt 1 }}{{ 1 is in [1] }}",
    "tojson": "{{ messages[2] | tojson }}\n{{ tools | tojson(indent=4) }}\n{{ {'b': 1, 'a': [1.0, 2.5e-7, none, false, 'é\\n\\t\"'], 'c': {}} | tojson(sort_keys=true) }}\n{{ [] | tojson(indent=2) }}{{ {'x': []} | tojson(indent=2) }}{{ 'ü' | tojson(ensure_ascii=true) }}{{ [1, 2] | tojson(separators=(',', ':')) }}",
    "string_repr": "{{ messages[2].tool_calls }}|{{ messages[1] }}|{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 1.0, none, true] }}|{{ {'k': ('a',), 't': (1, 2)} }}|{{ messages[-1].content | list | length }}|{{ messages[-1] | string }}",
    "string_filters": "{{ messages[1].content | trim }}|{{ '  x y  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | upper }}{{ 'HeLLo' | lower }}{{ 'hello world' | title }}{{ 'hELLO wORLD' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}{{ 'aaa' | replace('a', 'b', 2) }}|{{ messages | map(attribute='role') | join(', ') }}|{{ messages | map(attribute='role') | first }}{{ messages | map(attribute='role') | list | last }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'in', ['user', 'tool']) | map(attribute='role') | join }}{{ messages | selectattr('tool_calls') | list | length }}{{ messages | selectattr('tool_calls', 'defined') | list | length }}",
    "more_filters": "{{ x | default('d') }}{{ '' | default('e', true) }}{{ none | default('n') }}{{ messages | length }}{{ 'abc' | count }}|{{ '42' | int + 1 }}{{ '4.5' | float }}{{ 'x' | int }}{{ 3.9 | int }}{{ -3 | abs }}{{ 2.567 | round(2) }}{{ 2.5 | round }}{{ 7 | round(method='floor') }}|{{ ['b', 'A', 'a', 'c', 'b'] | unique | join }}{{ [3, 1, 2] | sort | join }}{{ ['b', 'A', 'c'] | sort(reverse=true) | join }}{{ [1, 2, 3] | reverse | join }}{{ 'abc' | reverse }}{{ [1, 2, 3.5] | sum }}{{ [4, 2, 8] | min }}{{ [4, 2, 8] | max }}|{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(3, true) }}|{{ [1,2,3,4,5] | batch(2) | list }}|{{ '<x&y>' | escape }}{{ '<s>' | safe }}|{{ ['a', 'b'] | map('upper') | join }}|{{ {'b': 1, 'a': 2} | dictsort }}",
    "methods": "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'xxaxx'.strip('x') }}{{ '  a '.lstrip() }}.{{ ' a  '.rstrip() }}.|{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.upper() }}{{ 'HeLLo'.lower() }}{{ 'ab ab'.replace('ab', 'c', 1) }}{{ 'hello world'.title() }}|{{ messages[0].get('content') }}{{ messages[0].get('nope', 'dflt') }}{{ messages[0].get('nope') }}|{{ messages[0].keys() | list }}{{ messages[0].values() | list }}|{{ '{} and {}'.format(1, 'x') }}{{ 'abcabc'.find('c') }}{{ 'abcabc'.rfind('c') }}{{ 'abcabc'.count('b') }}{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}",
    "reasoning_alias": "{% for m in messages %}{{ m | tojson }}\n{% endfor %}",
    "kwargs_and_globals": "{{ bos_token }}{{ enable_thinking }}{{ custom.a[1] }}{{ strftime_now('%Y-%m-%d %d %b %Y') }}{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ dict(a=1, b='x') }}{{ tools is none }}{{ documents }}{{ add_generation_prompt }}",
    "unicode_case": "{{ messages[-1].content | upper }}|{{ 'straße ǆ' | upper }}|{{ 'ÀÉÎ' | lower }}|{{ messages[-1].content | length }}|{{ messages[-1].content[3:6] }}",
    "undefined_print": "[{{ nothing }}][{{ messages[0].nothing }}][{{ messages[9] }}][{{ nothing | default('d') }}][{{ nothing is defined }}][{{ messages[0]['x'] is undefined }}][{{ nothing | length }}][{{ nothing ~ 'x' }}]",
}

ERROR_CASES = {
    "raise": ("{{ raise_exception('bad ' ~ messages | length) }}", "TemplateError: bad 5"),
    "undefined_attr": ("{{ nothing.attr }}", "UndefinedError"),
    "undefined_concat": ("{{ 'a' + messages[0].missing }}", "UndefinedError"),
    "concat_list": ("{{ 'a' + messages }}", "TypeError"),
    "compare_types": ("{{ 1 < 'a' }}", "TypeError"),
    "div_zero": ("{{ 1 // 0 }}", "ZeroDivisionError"),
}


def check_binary():
    if not os.path.exists(binary()):
        pytest.skip(f"{binary()} not built (set DEEPINFER_BIN)")


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_constructs(tmp_path, name):
    check_binary()
    src = CASES[name]
    kwargs = {}
    if name == "kwargs_and_globals":
        kwargs = {"bos_token": "<s>", "enable_thinking": False, "custom": {"a": [1, "two"]}}
    want = jinja_render(src, MSGS, add_generation_prompt=True, **kwargs)
    r = ours(tmp_path, src, MSGS, add_generation_prompt=True, **kwargs)
    assert r.returncode == 0, r.stderr.decode()
    got = r.stdout.decode("utf-8")
    assert got == want, f"\n--- got ---\n{got!r}\n--- want ---\n{want!r}"


def test_tools_variable(tmp_path):
    check_binary()
    src = "{% if tools %}{% for t in tools %}{{ t.function.name }}:{{ t.function.parameters | tojson }}{% endfor %}{% endif %}"
    want = jinja_render(src, MSGS, tools=TOOLS)
    r = ours(tmp_path, src, MSGS, tools=TOOLS)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == want


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors(tmp_path, name):
    check_binary()
    src, want = ERROR_CASES[name]
    with pytest.raises(Exception) as e:
        jinja_render(src, MSGS)
    assert f"{type(e.value).__name__}: {e.value}".startswith(want)
    r = ours(tmp_path, src, MSGS)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("deepinfer template: " + want), err


def test_unsupported_fails_at_load_with_position(tmp_path):
    check_binary()
    r = ours(tmp_path, "ok\n{% for x in y %}{% include 'a' %}{% endfor %}", MSGS)
    assert r.returncode == 2 and b"line 2:20" in r.stderr, r.stderr


def gguf_kv(path):
    """The key/value section of a GGUF file (gguf-py's reader maps every tensor, which is slow)."""
    import struct

    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode("utf-8", "replace")

    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            at, n = take("I"), take("Q")
            return [value(at) for _ in range(n)]
        return take(scalars[t])

    assert data[:4] == b"GGUF"
    pos = 8
    take("Q")
    out = {}
    for _ in range(take("Q")):
        k = string()
        out[k] = value(take("I"))
    return out


def test_smollm2_gguf_template(tmp_path):
    """The chat template inside the SmolLM2 test GGUF, over the shared conversations."""
    check_binary()
    gguf_path = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf_path.exists():
        pytest.skip("SmolLM2 GGUF not fetched (scripts/fetch-models)")
    kv = gguf_kv(gguf_path)
    src = kv["tokenizer.chat_template"]
    toks = kv["tokenizer.ggml.tokens"]
    bos, eos = toks[kv["tokenizer.ggml.bos_token_id"]], toks[kv["tokenizer.ggml.eos_token_id"]]
    convs = json.loads((SHARED / "tokenizers" / "chat" / "qwen3" / "conversations.json").read_text())
    n = 0
    # once through the GGUF's own template and special tokens, the rest with the extracted text (fast)
    first = convs[1]
    want = jinja_render(src, first["messages"], add_generation_prompt=True, bos_token=bos, eos_token=eos)
    r = ours(tmp_path, src, first["messages"], add_generation_prompt=True, tokenizer=gguf_path)
    assert r.returncode == 0 and r.stdout.decode() == want, r.stderr.decode()
    for c in convs:
        for agp in (False, True):
            try:
                want = jinja_render(src, c["messages"], tools=c.get("tools"), add_generation_prompt=agp,
                                    bos_token=bos, eos_token=eos)
            except Exception as e:  # noqa: BLE001 - the error is the expected output
                want = e
            r = ours(tmp_path, src, c["messages"], tools=c.get("tools"), add_generation_prompt=agp,
                     bos_token=bos, eos_token=eos)
            if isinstance(want, Exception):
                assert r.returncode == 2, (c["id"], r.stdout)
                assert type(want).__name__ in r.stderr.decode(), (c["id"], r.stderr)
            else:
                assert r.returncode == 0, (c["id"], r.stderr.decode())
                assert r.stdout.decode() == want, c["id"]
                n += 1
    assert n >= 20


def test_shipped_templates_via_cli(tmp_path):
    """The CLI (not just the library) reproduces a reference render of every shipped template."""
    check_binary()
    import lzma
    import shutil

    # tokenizer_config.json and chat_template.jinja sources; the unit test covers all six
    for name in ["qwen3", "gpt-oss"]:
        d = Path.home() / ".cache" / "deepinfer" / "tokenizers" / name
        if not (d / "tokenizer.json").exists():
            d.mkdir(parents=True, exist_ok=True)
            for f in (SHARED / "tokenizers" / name).iterdir():
                if f.suffix in (".json", ".jinja"):
                    shutil.copy(f, d / f.name)
            with lzma.open(SHARED / "tokenizers" / name / "tokenizer.json.xz") as fi, open(d / "tj.tmp", "wb") as fo:
                shutil.copyfileobj(fi, fo)
            (d / "tj.tmp").rename(d / "tokenizer.json")
        convs = {c["id"]: c for c in json.loads((SHARED / "tokenizers" / "chat" / name / "conversations.json").read_text())}
        with lzma.open(SHARED / "tokenizers" / "chat" / name / "renders.jsonl.xz", "rt") as f:
            recs = [json.loads(line) for line in f]
        rec = next(r for r in recs if r["conversation"] == "tool_call_pending_result" and r["text"]
                   and r["kwargs"].get("add_generation_prompt")) if name not in ("gemma3",) else \
            next(r for r in recs if r["conversation"] == "system_multi_turn_ends_assistant" and r["text"])
        c = convs[rec["conversation"]]
        (tmp_path / "m.json").write_text(json.dumps(c["messages"], ensure_ascii=False))
        cmd = [binary(), "template", "--tokenizer", str(d), "--messages", str(tmp_path / "m.json"),
               "--now", "2025-08-05"]
        if c.get("tools"):
            (tmp_path / "tools.json").write_text(json.dumps(c["tools"]))
            cmd += ["--tools", str(tmp_path / "tools.json")]
        kw = {k: v for k, v in rec["kwargs"].items() if k != "add_generation_prompt"}
        if rec["kwargs"].get("add_generation_prompt"):
            cmd.append("--add-generation-prompt")
        if kw:
            cmd += ["--kwargs", json.dumps(kw)]
        r = subprocess.run(cmd, capture_output=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr.decode())
        assert r.stdout.decode() == rec["text"], name
        r = subprocess.run(cmd + ["--ids"], capture_output=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr.decode())
        assert json.loads(r.stdout) == rec["ids"], name


def random_conversation(rng):
    pieces = ["Hello", " world", "\n", "\n\n", "  ", "\t", "\u00a0", "\u3000", "é", "e\u0301", "🇫🇷", "👨‍👩‍👧",
              "<|im_start|>", "<think>", "</think>", "[INST]", "<start_of_turn>", "{\"a\": 1}", "'", "\"", "\\",
              "</tool_call>", "ß", "İ", "x" * 50, "数字123", "\r\n", " ", "<|eot_id|>", "<｜User｜>"]

    def text():
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))

    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text()})
    for i in range(rng.randint(1, 5)):
        msgs.append({"role": "user", "content": text()})
        if rng.random() < 0.8:
            m = {"role": "assistant", "content": text()}
            if rng.random() < 0.3:
                m["reasoning_content"] = text()
            msgs.append(m)
    if rng.random() < 0.5 and msgs[-1]["role"] == "assistant":
        msgs.pop()
    return msgs


def test_random_conversations_shipped_templates(tmp_path):
    """Random conversations (whitespace runs, combining marks, special-token text,
    quotes) through the six shipped templates: byte-equal to jinja2, or the same
    error class."""
    check_binary()
    import random

    rng = random.Random(int(os.environ.get("DI_TEMPLATE_SEED", "1234")))
    n = int(os.environ.get("DI_TEMPLATE_RANDOM", "8"))
    for name in ["deepseek-v3", "llama3", "qwen3", "gemma3", "gpt-oss", "mistral7b"]:
        d = SHARED / "tokenizers" / name
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        src = cfg.get("chat_template") or (d / "chat_template.jinja").read_text()

        def special(k):
            v = cfg.get(k)
            return v.get("content") if isinstance(v, dict) else v

        kw = {k: special(k) for k in ("bos_token", "eos_token") if special(k)}
        for _ in range(n):
            msgs = random_conversation(rng)
            agp = rng.random() < 0.5
            try:
                want = jinja_render(src, msgs, add_generation_prompt=agp, **kw)
            except Exception as e:  # noqa: BLE001
                want = e
            r = ours(tmp_path, src, msgs, add_generation_prompt=agp, **kw)
            if isinstance(want, Exception):
                assert r.returncode == 2 and type(want).__name__ in r.stderr.decode(), (name, msgs, r.stderr)
            else:
                assert r.returncode == 0, (name, msgs, r.stderr.decode())
                assert r.stdout.decode() == want, (name, msgs)
