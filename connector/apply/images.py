"""Debezium's row values, as the typed columns read them.

CockroachDB's JSON is what the typed columns read (:mod:`crdb_pubsub.decode.typed`). A Debezium
(or TiCDC) image says some types its own way; where the JSON alone says what a value is, it is
rewritten for the column's type, and nothing else is:

* DECIMAL from a JSON string of a decimal number (``decimal.handling.mode=string``, the mode that
  keeps a DECIMAL's digits in JSON); a number (``double``, TiCDC's float64) is read as a number.
* BINARY from base64 text (``binary.handling.mode=bytes``, the default; TiCDC's binary strings).
* BOOLEAN from ``0``/``1`` (MySQL's and TiCDC's ``TINYINT(1)``/``BOOLEAN``, an INT16 in Debezium).

A time sent as an integer (``io.debezium.time.MicroTimestamp``, ``Timestamp``, ``Date`` is days and
is read as such) has its unit only in the event's schema: into a TIMESTAMP column it is refused
with the reason; declare the column BIGINT (or have the connector send ISO text, as
``ZonedTimestamp`` does). ``__debezium_unavailable_value`` (a TOASTed PostgreSQL value the change
did not carry) is refused too: writing it would replace the column's real value.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

import msgspec
from pyspark.sql import types as T

from ..decode.typed import TypedError

__all__ = ["image_adapter"]

_OBJ = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STR = msgspec.json.Decoder(str)
_DECIMAL_TEXT = re.compile(rb'"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"\Z')
_INT = re.compile(rb"-?[0-9]+\Z")
UNAVAILABLE = b'"__debezium_unavailable_value"'
_UNAVAILABLE_TEXT = UNAVAILABLE.decode()

Adapt = Callable[[bytes, str], bytes]


def _decimal(raw: bytes, column: str) -> bytes:
    return raw[1:-1] if _DECIMAL_TEXT.match(raw) else raw


def _binary(raw: bytes, column: str) -> bytes:
    if raw[:1] != b'"':
        return raw
    try:
        data = base64.b64decode(_STR.decode(raw), validate=True)
    except (binascii.Error, ValueError):
        raise TypedError(
            f"column `{column}`: {raw[:60].decode(errors='replace')} is not base64 "
            "(binary.handling.mode=bytes, the default; declare STRING for hex or base64 text)"
        ) from None
    return b'"\\\\x' + data.hex().encode() + b'"'


def _boolean(raw: bytes, column: str) -> bytes:
    return {b"0": b"false", b"1": b"true"}.get(raw, raw)


def _timestamp(raw: bytes, column: str) -> bytes:
    if _INT.match(raw):
        raise TypedError(
            f"column `{column}`: the integer {raw.decode()} is a Debezium time whose unit (ms, us, ns) only the "
            "event's schema names: declare the column BIGINT, or have the connector send ISO text"
        )
    return raw


def _adapter_of(dtype: T.DataType) -> Adapt | None:
    if isinstance(dtype, T.DecimalType):
        return _decimal
    if isinstance(dtype, T.BinaryType):
        return _binary
    if isinstance(dtype, T.BooleanType):
        return _boolean
    if isinstance(dtype, T.TimestampType):
        return _timestamp
    return None


def image_adapter(struct: T.StructType) -> Callable[[str], str]:
    """Return a function that rewrites a Debezium row image (JSON text) for ``struct``'s typed columns.

    Raises :class:`TypedError` (a malformed change) for a value no column of that type can take.
    """
    adapters = {f.name: a for f in struct.fields if (a := _adapter_of(f.dataType)) is not None}

    def adapt(text: str) -> str:
        if not adapters and _UNAVAILABLE_TEXT not in text:
            return text
        row = _OBJ.decode(text)
        out = []
        changed = False
        for name, value in row.items():
            raw = bytes(value)
            if raw == UNAVAILABLE:
                raise TypedError(
                    f"column `{name}`: __debezium_unavailable_value (a TOASTed value the change did not carry): "
                    "set REPLICA IDENTITY FULL on the table"
                )
            fn = adapters.get(name)
            if fn is not None and raw != b"null":
                new = fn(raw, name)
                changed |= new is not raw and new != raw
                raw = new
            out.append(msgspec.json.encode(name) + b": " + raw)
        return ("{" + ", ".join(p.decode() for p in out) + "}") if changed else text

    return adapt
