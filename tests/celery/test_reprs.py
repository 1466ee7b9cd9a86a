"""``celery/producer/reprs.py`` writes what Celery's ``saferepr`` writes, for every value and limit."""

from __future__ import annotations

import random
from collections import OrderedDict, namedtuple
from enum import IntEnum
from typing import Any

import pytest
from celery.utils.saferepr import saferepr

from celery_zset_scheduler.celery.producer.reprs import argsrepr


class Level(IntEnum):
    LOW = 1


Point = namedtuple("Point", "x y")

VALUES: list[Any] = [
    (), [], {}, (1,), [1], (1, 2), ("a",), ("it's", 'say "hi"', "\\", "line\nbreak", "\t", "é€😀", "\ud800", ""),
    (True, False, None, 0, -1, 10**30, 1.5, -0.0, float("inf"), float("nan"), 1e-300),
    {"a": 1, "b": "it's", 3: None}, {True: 1}, {1.5: 2}, {(1, 2): 3}, {"nested": {"x": [1]}},
    ((1, 2), [3]), (b"bytes",), (bytearray(b"x"),), (Level.LOW,), Point(1, 2), OrderedDict(a=1),
    (object,), ({1, 2},), (frozenset(),), "not a container", 5, None,
    ("x" * 1020,), ("x" * 1021,), ("x" * 1022,), ("x" * 1023,), ("x" * 2000,), tuple(range(300)),
    {"k": "v" * 1015}, {"k": "v" * 1016}, {"k": "v" * 1017},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("maxlen", [1024, 8, 3, 1])
@pytest.mark.parametrize("maxlevels", [3, 0, 1, -1])
def test_the_same_text_as_saferepr(value: Any, maxlen: int, maxlevels: int) -> None:
    assert argsrepr(value, maxlen, maxlevels) == saferepr(value, maxlen, maxlevels=maxlevels)


def test_random_flat_arguments() -> None:
    rng = random.Random(7)
    atoms: list[Any] = [None, True, False, 0, 7, -12345678901234567890, 0.1, 2.5e10, "", "a", "'", '"', "\\'",
                        "x y z", "ü", "\n"]

    def atom() -> Any:
        value = rng.choice(atoms)
        return value * rng.randint(1, 400) if isinstance(value, str) and rng.random() < 0.2 else value

    for _ in range(3000):
        size = rng.randint(0, 12)
        kind = rng.choice(("tuple", "list", "dict"))
        if kind == "dict":
            value: Any = {rng.choice(["k", "it's", "é"]) + str(i) if rng.random() < 0.7 else i: atom()
                          for i in range(size)}
        else:
            items = [atom() for _ in range(size)]
            value = tuple(items) if kind == "tuple" else items
        maxlen = rng.choice((1024, 1024, 50, 10))
        assert argsrepr(value, maxlen, 3) == saferepr(value, maxlen, maxlevels=3), value
