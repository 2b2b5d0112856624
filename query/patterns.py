r"""Patterns in filters: LIKE's (`*` and `%` match any run, `_` one character, `\` escapes the next),
as SQL LIKE and SQLite GLOB patterns, and match/imatch regular expressions, checked and bounded."""

from __future__ import annotations

import functools
import re

from query.tree import FilterError
from values import quoted

MAX_PATTERN = 200  # characters of a match/imatch regular expression


_ANY = object()


_ONE = object()


def like_parts(pattern: str, where: str = "filter") -> list[object]:
    if "\x00" in pattern:
        # SQLite's LIKE and GLOB stop at NUL, so the rest of the pattern would be ignored.
        raise FilterError(f"pattern in {where} contains a NUL character")
    parts: list[object] = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise FilterError(
                    f"pattern {quoted(pattern)} ends with an escape character in {where}",
                    hint="write \\\\ for a literal backslash",
                )
            parts.append(escaped)
        elif char in "*%":
            parts.append(_ANY)
        elif char == "_":
            parts.append(_ONE)
        else:
            parts.append(char)
    return parts


def like_pattern(pattern: str) -> str:
    """The pattern for SQL LIKE with backslash as its escape character."""
    out = []
    for part in like_parts(pattern):
        if part is _ANY:
            out.append("%")
        elif part is _ONE:
            out.append("_")
        else:
            out.append("\\" + part if part in "%_\\" else part)
    return "".join(out)


def glob_pattern(pattern: str) -> str:
    """The pattern for SQLite GLOB, which has no escape character, only [x] classes."""
    out = []
    for part in like_parts(pattern):
        if part is _ANY:
            out.append("*")
        elif part is _ONE:
            out.append("?")
        else:
            out.append(f"[{part}]" if part in "*?[]" else part)
    return "".join(out)


_NESTED_REPEAT = re.compile(r"[*+}?]\)[*+{]")


def check_pattern(pattern: str, where: str = "filter") -> str:
    """A match/imatch regular expression the databases can all run, bounded: at most MAX_PATTERN
    characters, no NUL, valid as a Python expression (SQLite runs it in Python), and no repetition
    of a repeated group such as (a+)+, the classic catastrophic backtracking."""
    if len(pattern) > MAX_PATTERN:
        raise FilterError(f"regular expression in {where} is too long (at most {MAX_PATTERN} characters)")
    if "\x00" in pattern:
        raise FilterError(f"regular expression in {where} contains a NUL character")
    if _NESTED_REPEAT.search(pattern):
        raise FilterError(
            f"regular expression {quoted(pattern)} in {where} repeats a repeated group",
            hint="nested repetition such as (a+)+ is refused: it can take exponential time",
        )
    try:
        compiled_pattern(pattern)
    except (re.error, OverflowError, RecursionError):
        raise FilterError(f"invalid regular expression {quoted(pattern)} in {where}") from None
    return pattern


@functools.lru_cache(maxsize=256)
def compiled_pattern(pattern: str) -> re.Pattern:
    return re.compile(pattern)
