"""Hypothesis strategies the property tests share: cheap to draw, the same on every machine.

Text is drawn from :data:`ALPHABET`, never from ``st.text()``'s default alphabet. The default
one makes Hypothesis build a table of every code point its codec can encode (1.1 million
``chr(i).encode()`` calls, cached under ``.hypothesis/unicode_data``): on a fresh clone that costs
seconds *inside the first draw* of whichever test draws text first, which fails Hypothesis'
``too_slow`` health check ("only generated 1 valid inputs after 2.36 seconds"). The alphabet below keeps what our parsers care about: ASCII, JSON's escapes, control
characters, two- three- and four-byte UTF-8, a combining mark, a right-to-left mark and a BOM.
"""

from __future__ import annotations

from typing import Any, Final

from hypothesis import strategies as st

__all__ = ["ALPHABET", "WRONGLY_TYPED", "json_values", "text"]

#: what text strategies draw from (see the module docstring)
ALPHABET: Final = (
    "aZ09 -_.:/=@"  # ASCII: names, ids, paths
    '"\\'  # JSON's escapes
    "\t\n\x00\x1f\x7f"  # control characters, NUL among them
    "é߷"  # two bytes in UTF-8
    "€世\u200f\ufeff"  # three bytes: a right-to-left mark, a byte-order mark
    "\u0301"  # a combining mark
    "\U0001f600\U0010ffff"  # four bytes, the last code point
)


def text(max_size: int = 20, *, min_size: int = 0, alphabet: str = ALPHABET) -> st.SearchStrategy[str]:
    """Strings over ``alphabet`` (:data:`ALPHABET` unless a test needs its own few characters).

    A list of characters joined, not ``st.text(alphabet=...)``: Hypothesis turns any alphabet given
    to ``st.text`` (a string, or ``sampled_from`` of one-character strings) into its character
    strategy, which builds its table of Unicode categories first (cached under ``.hypothesis``;
    inside a ``st.recursive`` that happens during a draw).
    """
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map("".join)


def json_values(*, max_leaves: int = 20, max_text: int = 20) -> st.SearchStrategy[Any]:
    """Any JSON value: null, booleans, integers (past 64 bits too), floats, strings, lists, objects."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False)
        | text(max_text),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(10), inner, max_size=4),
        max_leaves=max_leaves,
    )


#: one JSON value of each kind a wrong type can take, nested ones included; a fixed pool, so a
#: strategy over it draws an index and nothing else
WRONGLY_TYPED: Final[tuple[Any, ...]] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    -(2**63) - 1,
    2**64,
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "io.sessionsupervisor.control.v1.Status",
    "\x00",
    "\U0001f600",
    [],
    [1, "a"],
    [[[]]],
    {},
    {"a": 1},
    {"method": {"method": None}},
)
