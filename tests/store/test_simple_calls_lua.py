"""The fast path's envelope builder reads a simple call (codec layout 5) exactly as the codec
does: the same texts are simple calls, and they give the same argsrepr (real Redis, the
builder's own Lua)."""

from __future__ import annotations

import random
from typing import Any

from celery_zset_scheduler.model.codec import _SIMPLE_ARGS, _simple_reprs
from celery_zset_scheduler.store.scripts import resolve_includes

# What the builder makes of each ARGV: its argsrepr when a simple call, else false.
PROBE = resolve_includes('''--- @include "envelope"
local out = {}
for i, args in ipairs(ARGV) do out[i] = simple_args(args) and simple_reprs(args) or false end
return out
''')

CASES = [
    "", "1", "-1", "0, 0", "1234567, 1234567", '"a"', '""', '"a b", 7', '"~!#$%&()*+-./:;<=>?@[]^_`{|}"',
    "1,2", "1,  2", "1, ", ", 1", " 1", "1 ", "--1", "-", "1.5", "1e5", "true", "null", "[1]", '"a,b"', '"it\'s"',
    '"a\\\\b"', '"a\\"b"', '"\\u00e9"', '"é"', '"a\tb"', '"a\nb"', '"a"b"', '"a', 'a"', '"a""b"', '"a", ', "1, 2, 3",
    '1, "x", -2, ""', "\x7f", '"\x7f"', "01", "-01", "00", "1, 01", "-0", "0", "10", "+1",
]


def _random_text(rnd: random.Random) -> str:
    alphabet = ['"', "'", ",", " ", ", ", "1", "0", "-", "a", "\\", "é", "\x7f", "\t", "[", "~"]
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(8)))


def test_the_builder_and_the_codec_agree_on_simple_calls(redis_server: Any) -> None:
    rnd = random.Random(7)
    texts = CASES + [_random_text(rnd) for _ in range(3000)]
    got = redis_server.client().eval(PROBE, 0, *[t.encode() for t in texts])
    assert len(got) == len(texts)
    simple = 0
    for text, found in zip(texts, got, strict=True):
        raw = text.encode()
        expected = _simple_reprs(raw) if _SIMPLE_ARGS.fullmatch(raw) else None
        assert (found.decode() if found else None) == expected, text
        simple += expected is not None
    assert simple > 100
