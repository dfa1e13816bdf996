"""Property test: for random regexes (literals, classes, negated classes, `.`,
\\d, \\w, groups, alternation, * + ? {m,n}, non-ASCII characters) the strings
`deepinfer grammar-check --regex` accepts as a whole are exactly those Python
`re.fullmatch` accepts (re.ASCII, whose \\d \\w are ECMAScript's), on strings
drawn both from the regex itself and at random."""
import json
import random
import re
import subprocess

from tok_common import binary

ALPHA = ["a", "b", "c", "1", "\u00e9", "\u20ac", "\U0001F600", "-", " "]


class Node:
    def __init__(self, rx, gen):
        self.rx, self.gen = rx, gen


def atom(r, depth):
    k = r.randrange(8 if depth < 3 else 5)
    if k == 0:
        c = r.choice(ALPHA)
        return Node(re.escape(c), lambda r, c=c: c)
    if k == 1:
        cs = sorted(set(r.sample(ALPHA, r.randint(1, 3))))
        return Node("[" + "".join(re.escape(c) for c in cs) + "]", lambda r, cs=cs: r.choice(cs))
    if k == 2:
        cs = sorted(set(r.sample(ALPHA, r.randint(1, 3))))
        rest = [c for c in ALPHA if c not in cs]
        return Node("[^" + "".join(re.escape(c) for c in cs) + "]", lambda r, rest=rest: r.choice(rest))
    if k == 3:
        return Node(".", lambda r: r.choice(ALPHA))
    if k == 4:
        return Node(r.choice([r"\d", r"\w"]), lambda r: r.choice(["1", "a"]))
    inner = alt(r, depth + 1)
    return Node("(?:" + inner.rx + ")", inner.gen)


def quant(r, depth):
    a = atom(r, depth)
    # unbounded repetition of a group would let Python's backtracking take exponential time
    k = r.randrange(7) if not a.rx.startswith("(?:") else r.choice([2, 3, 4, 5, 6])
    if k == 0:
        return Node(a.rx + "*", lambda r: "".join(a.gen(r) for _ in range(r.randint(0, 3))))
    if k == 1:
        return Node(a.rx + "+", lambda r: "".join(a.gen(r) for _ in range(r.randint(1, 3))))
    if k == 2:
        return Node(a.rx + "?", lambda r: a.gen(r) if r.random() < 0.5 else "")
    if k == 3:
        m = r.randint(0, 2)
        n = m + r.randint(0, 2)
        return Node(a.rx + "{%d,%d}" % (m, n), lambda r: "".join(a.gen(r) for _ in range(r.randint(m, n))))
    return a


def seq(r, depth):
    items = [quant(r, depth) for _ in range(r.randint(1, 4))]
    return Node("".join(i.rx for i in items), lambda r: "".join(i.gen(r) for i in items))


def alt(r, depth):
    alts = [seq(r, depth) for _ in range(r.randint(1, 3 if depth < 2 else 1))]
    return Node("|".join(a.rx for a in alts), lambda r: r.choice(alts).gen(r))


def test_regex_matches_python_re():
    r = random.Random(1234)
    disagreements = []
    n_match = too_large = 0
    for _ in range(60):
        node = alt(r, 0)
        strings = set()
        for _ in range(25):
            s = node.gen(r)
            strings.add(s)
            if s and r.random() < 0.5:  # a near miss: one character changed, dropped or added
                i = r.randrange(len(s))
                strings.add(s[:i] + r.choice(ALPHA) + s[i + 1:])
                strings.add(s[:i] + s[i + 1:])
                strings.add(s[:i] + r.choice(ALPHA) + s[i:])
        for _ in range(10):
            strings.add("".join(r.choice(ALPHA) for _ in range(r.randint(0, 6))))
        strings = sorted(strings)
        p = subprocess.run([binary(), "grammar-check", "--regex", node.rx],
                           input="".join(json.dumps(s) + "\n" for s in strings).encode(), capture_output=True)
        if p.returncode == 2 and b"no string" in p.stderr:
            assert not any(re.fullmatch(node.rx, s, re.ASCII) for s in strings)
            continue
        if p.returncode == 2 and b"too large" in p.stderr:  # bounded refusal (DFA size cap)
            too_large += 1
            continue
        assert p.returncode == 0, (node.rx, p.stderr.decode())
        got = p.stdout.decode().split()
        assert len(got) == len(strings)
        for s, g in zip(strings, got):
            if len(s) > 14:
                continue
            want = re.fullmatch(node.rx, s, re.ASCII) is not None
            n_match += want
            if (g == "true") != want:
                disagreements.append((node.rx, s, g, want))
    assert not disagreements, disagreements[:10]
    assert too_large <= 3
    assert n_match > 400  # the generator does produce matching strings
