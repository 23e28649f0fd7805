"""CockroachDB's JSON encoding, byte for byte: Go's string escaper, sorted keys, exact numbers."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

# CockroachDB's encoder (pkg/util/json) is Go's string escaper without HTML escaping: quote,
# backslash, \n \r \t, other control bytes as \u00xx (lowercase hex), and U+2028/U+2029.
_ESCAPE_RE = re.compile('[\x00-\x1f"\\\\\u2028\u2029]')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Go's json.Marshal (legacy sink wrapper) additionally escapes these when compacting RawMessage.
_HTML_RE = re.compile("[<>&]")


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def json_string(s: str, escape_html: bool) -> str:
    out = _ESCAPE_RE.sub(_escape_char, s)
    if escape_html:
        out = _HTML_RE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", out)
    return '"' + out + '"'


def _float_text(f: float) -> str:
    # CockroachDB goes float64 -> apd.Decimal (shortest digits) -> to-sci-string; Python's
    # repr gives the same shortest digits and Decimal.normalize the same exponent.
    if f == 0:
        return "0"
    return str(Decimal(repr(f)).normalize())


def crdb_json(value: Any, *, compact: bool = False, escape_html: bool = False) -> str:
    """Encode ``value`` exactly as CockroachDB's changefeed JSON encoder does.

    Contract: dict keys are sorted (by code point, which is UTF-8 byte order) at every level;
    separators are ``", "`` and ``": "`` unless ``compact`` (Go ``json.Compact`` style, as the
    legacy sink produces); strings stay raw UTF-8; ``escape_html`` escapes ``<>&`` like Go's
    ``json.Marshal``. ``Decimal`` is written with its exact digits (``26.30`` stays ``26.30``),
    ``int`` with all digits, ``float`` as CockroachDB prints a FLOAT (shortest digits), ``None``
    as ``null``. Non-finite floats are rejected: CockroachDB sends them as strings, so store the
    string (``"NaN"``) instead.
    """
    item_sep, key_sep = (",", ":") if compact else (", ", ": ")
    parts: list[str] = []

    def emit(v: Any) -> None:
        if v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif isinstance(v, str):
            parts.append(json_string(v, escape_html))
        elif isinstance(v, int):
            parts.append(str(v))
        elif isinstance(v, Decimal):
            if not v.is_finite():
                raise ValueError(f"non-finite Decimal {v!r} has no JSON form")
            parts.append(str(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"non-finite float {v!r}: CockroachDB sends it as a string")
            parts.append(_float_text(v))
        elif isinstance(v, Mapping):
            parts.append("{")
            for i, k in enumerate(sorted(v)):
                if i:
                    parts.append(item_sep)
                parts.append(json_string(k, escape_html))
                parts.append(key_sep)
                emit(v[k])
            parts.append("}")
        elif isinstance(v, (list, tuple)):
            parts.append("[")
            for i, item in enumerate(v):
                if i:
                    parts.append(item_sep)
                emit(item)
            parts.append("]")
        else:
            raise TypeError(f"cannot encode {type(v).__name__} as changefeed JSON")

    emit(value)
    return "".join(parts)
