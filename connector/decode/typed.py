"""Typed rows: turn a row's exact JSON text (or a CSV record) into Python values for an Arrow struct.

Numbers are read from the digits CockroachDB sent, never through a float, and a value that does not
fit its column (too many digits, more scale than the DECIMAL allows, outside the integer range, the
wrong JSON type) raises :class:`TypedError` naming the column and the value: the decoder turns that
into a malformed row instead of silently truncating.

Converters are built once per schema (:func:`json_row_converter`, :func:`csv_row_converter`) so the
per-row work is a chain of plain function calls.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import msgspec
from pyspark.sql import types as T

__all__ = ["TypedError", "csv_row_converter", "json_row_converter", "struct_column"]


class TypedError(ValueError):
    """A value that does not fit its column; the message names the column and the value."""


_OBJ = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_STR = msgspec.json.Decoder(str)
_INT_RE = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
_NUM_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_INT_RANGES: dict[type[T.DataType], tuple[int, int, str]] = {
    T.ByteType: (-(2**7), 2**7 - 1, "TINYINT"),
    T.ShortType: (-(2**15), 2**15 - 1, "SMALLINT"),
    T.IntegerType: (-(2**31), 2**31 - 1, "INT"),
    T.LongType: (-(2**63), 2**63 - 1, "BIGINT"),
}
_TS_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:?\d{2})?\Z")
_EPOCH_DATE = _dt.date(1970, 1, 1)
_DEC_CTX = decimal.Context(prec=80, Emax=999999, Emin=-999999)
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

Conv = Callable[[bytes, str], Any]


def _show(raw: bytes | str, limit: int = 60) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text if len(text) <= limit else text[:limit] + "..."


def _json_kind(raw: bytes) -> str:
    c = raw[:1]
    return {b"{": "object", b"[": "array", b'"': "string", b"t": "boolean", b"f": "boolean", b"n": "null"}.get(
        c, "number"
    )


def _wrong(path: str, want: str, raw: bytes) -> TypedError:
    return TypedError(f"column `{path}`: expected {want}, got JSON {_json_kind(raw)} {_show(raw)}")


# -- scalar parsers shared by JSON and CSV ---------------------------------------------------------


def _decimal_from_text(text: str, dtype: T.DecimalType, path: str) -> decimal.Decimal:
    if not _NUM_RE.match(text):
        raise TypedError(f"column `{path}`: {_show(text)!s} is not a decimal number")
    value = decimal.Decimal(text)
    _sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # _NUM_RE admits only finite numbers: no 'n'/'N'/'F' exponent
    # Trailing zeros after the point carry no value, so 26.30 fits DECIMAL(10,1) without loss.
    scale = 0
    if exponent < 0:
        frac = digits[exponent:] if -exponent <= len(digits) else (0,) * (-exponent - len(digits)) + digits
        stripped = len(frac)
        while stripped and frac[stripped - 1] == 0:
            stripped -= 1
        scale = stripped
    if scale > dtype.scale:
        raise TypedError(
            f"column `{path}`: {_show(text)} has {scale} fractional digits, more than DECIMAL"
            f"({dtype.precision},{dtype.scale}) allows"
        )
    integral = 0 if value.is_zero() else max(0, value.adjusted() + 1)
    if integral > dtype.precision - dtype.scale:
        raise TypedError(
            f"column `{path}`: {_show(text)} has {integral} integer digits, more than DECIMAL"
            f"({dtype.precision},{dtype.scale}) allows"
        )
    return value.quantize(decimal.Decimal(1).scaleb(-dtype.scale), context=_DEC_CTX)


def _int_from_text(text: str, lo: int, hi: int, name: str, path: str) -> int:
    if not _INT_RE.match(text.encode()):
        raise TypedError(f"column `{path}`: {_show(text)} is not an integer")
    value = int(text)
    if not lo <= value <= hi:
        raise TypedError(f"column `{path}`: {_show(text)} is out of range for {name}")
    return value


def _timestamp_from_text(text: str, path: str) -> _dt.datetime:
    m = _TS_RE.match(text)
    if m is None:
        raise TypedError(
            f"column `{path}`: {_show(text)!r} is not a timestamp (expected YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM])"
        )
    year, month, day, hour, minute, second, frac, zone = m.groups()
    micro = 0
    if frac:
        if len(frac) > 6 and frac[6:].strip("0"):
            raise TypedError(f"column `{path}`: {text!r} has sub-microsecond digits a Spark TIMESTAMP cannot hold")
        micro = int((frac + "000000")[:6])
    tz = _dt.UTC
    if zone and zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = _dt.timezone(sign * _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        return _dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=tz
        ).astimezone(_dt.UTC)
    except (ValueError, OverflowError) as exc:
        raise TypedError(f"column `{path}`: {text!r} is not a valid timestamp ({exc})") from None


def _date_from_text(text: str, path: str) -> _dt.date:
    try:
        if len(text) != 10:
            raise ValueError("expected YYYY-MM-DD")
        return _dt.date.fromisoformat(text)
    except ValueError as exc:
        raise TypedError(f"column `{path}`: {_show(text)!r} is not a date ({exc})") from None


def _binary_from_text(text: str, path: str) -> bytes:
    if not text.startswith("\\x"):
        raise TypedError(f"column `{path}`: {_show(text)!r} is not CockroachDB hex bytes (\\x...)")
    try:
        return bytes.fromhex(text[2:])
    except ValueError:
        raise TypedError(f"column `{path}`: {_show(text)!r} is not valid hex") from None


def _bool_from_text(text: str, path: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "t"):
        return True
    if lowered in ("false", "f"):
        return False
    raise TypedError(f"column `{path}`: {_show(text)!r} is not a boolean")


# -- JSON converters -------------------------------------------------------------------------------


def _json_string(raw: bytes, path: str) -> Any:
    if raw[:1] == b'"':
        return _STR.decode(raw)
    # Non-string JSON (numbers, objects, arrays) is kept as its exact text.
    return raw.decode("utf-8")


def _json_text_string(raw: bytes, path: str) -> str:
    if raw[:1] != b'"':
        raise _wrong(path, "a JSON string", raw)
    return _STR.decode(raw)


def _json_converter(dtype: T.DataType, path: str) -> Conv:
    if isinstance(dtype, T.StringType):
        return _json_string
    if type(dtype) in _INT_RANGES:
        lo, hi, name = _INT_RANGES[type(dtype)]

        def conv_int(raw: bytes, path: str) -> int:
            if not _INT_RE.match(raw):
                raise _wrong(path, f"an integer for {name}", raw)
            value = int(raw)
            if not lo <= value <= hi:
                raise TypedError(f"column `{path}`: {_show(raw)} is out of range for {name}")
            return value

        return conv_int
    if isinstance(dtype, T.DecimalType):

        def conv_decimal(raw: bytes, path: str) -> decimal.Decimal:
            if raw[:1] in (b'"', b"{", b"[", b"t", b"f"):
                raise _wrong(path, f"a number for DECIMAL({dtype.precision},{dtype.scale})", raw)
            return _decimal_from_text(raw.decode("ascii", "replace"), dtype, path)

        return conv_decimal
    if isinstance(dtype, (T.FloatType, T.DoubleType)):

        def conv_float(raw: bytes, path: str) -> float:
            if raw[:1] == b'"':
                text = _STR.decode(raw)
                if text in _SPECIAL_FLOATS:
                    return _SPECIAL_FLOATS[text]
                raise _wrong(path, 'a number (or "NaN"/"Infinity"/"-Infinity")', raw)
            if not _NUM_RE.match(raw.decode("ascii", "replace")):
                raise _wrong(path, "a number", raw)
            return float(raw)

        return conv_float
    if isinstance(dtype, T.BooleanType):

        def conv_bool(raw: bytes, path: str) -> bool:
            if raw == b"true":
                return True
            if raw == b"false":
                return False
            raise _wrong(path, "true or false", raw)

        return conv_bool
    if isinstance(dtype, T.DateType):

        def conv_date(raw: bytes, path: str) -> _dt.date:
            if _INT_RE.match(raw):
                # Debezium io.debezium.time.Date: days since the epoch.
                try:
                    return _EPOCH_DATE + _dt.timedelta(days=int(raw))
                except OverflowError:
                    raise TypedError(f"column `{path}`: {_show(raw)} days is out of range for DATE") from None
            return _date_from_text(_json_text_string(raw, path), path)

        return conv_date
    if isinstance(dtype, T.TimestampType):
        return lambda raw, path: _timestamp_from_text(_json_text_string(raw, path), path)
    if isinstance(dtype, T.BinaryType):
        return lambda raw, path: _binary_from_text(_json_text_string(raw, path), path)
    if isinstance(dtype, T.ArrayType):
        element = _json_converter(dtype.elementType, path + "[]")

        def conv_array(raw: bytes, path: str) -> list:
            if raw[:1] != b"[":
                raise _wrong(path, "a JSON array", raw)
            items = [bytes(item) for item in _LIST.decode(raw)]
            return [None if item == b"null" else element(item, path) for item in items]

        return conv_array
    if isinstance(dtype, T.MapType):
        value_conv = _json_converter(dtype.valueType, path + "{}")

        def conv_map(raw: bytes, path: str) -> list:
            if raw[:1] != b"{":
                raise _wrong(path, "a JSON object", raw)
            pairs = [(k, bytes(v)) for k, v in _OBJ.decode(raw).items()]
            return [(k, None if v == b"null" else value_conv(v, f"{path}.{k}")) for k, v in pairs]

        return conv_map
    if isinstance(dtype, T.StructType):
        return _struct_converter(dtype, path + ".")
    raise TypeError(f"row schema type {dtype.simpleString()} is not supported")


def _struct_converter(dtype: T.StructType, prefix: str) -> Conv:
    fields = [
        (f.name, _json_converter(f.dataType, f"{prefix}{f.name}"), f.nullable, f"{prefix}{f.name}")
        for f in dtype.fields
    ]

    def conv_struct(raw: bytes, path: str) -> dict:
        if raw[:1] != b"{":
            raise _wrong(path or "row", "a JSON object", raw)
        values = _OBJ.decode(raw)
        out: dict[str, Any] = {}
        for name, conv, nullable, column in fields:
            item: bytes | msgspec.Raw | None = values.get(name)
            if item is not None:
                item = bytes(item)  # msgspec.Raw does not compare equal to bytes
            if item is None or item == b"null":
                if not nullable:
                    raise TypedError(f"column `{column}` is NOT NULL but the row has no value for it")
                out[name] = None
            else:
                out[name] = conv(item, column)
        return out

    return conv_struct


def json_row_converter(schema: T.StructType) -> Callable[[bytes], dict]:
    """Build a function from a row's JSON object text to a dict of Python values matching ``schema``.

    Missing columns become None, extra JSON keys are ignored. Raises :class:`TypedError`.
    Duplicate keys inside a row follow msgspec (the last one wins).
    """
    conv = _struct_converter(schema, "")
    return lambda raw: conv(raw, "")


# -- CSV -------------------------------------------------------------------------------------------


def _csv_converter(dtype: T.DataType, path: str) -> Callable[[str], Any]:
    if isinstance(dtype, T.StringType):
        return lambda text: text
    if type(dtype) in _INT_RANGES:
        lo, hi, name = _INT_RANGES[type(dtype)]
        return lambda text: _int_from_text(text, lo, hi, name, path)
    if isinstance(dtype, T.DecimalType):
        return lambda text: _decimal_from_text(text, dtype, path)
    if isinstance(dtype, (T.FloatType, T.DoubleType)):

        def conv_float(text: str) -> float:
            if text in _SPECIAL_FLOATS:
                return _SPECIAL_FLOATS[text]
            if not _NUM_RE.match(text):
                raise TypedError(f"column `{path}`: {_show(text)!r} is not a number")
            return float(text)

        return conv_float
    if isinstance(dtype, T.BooleanType):
        return lambda text: _bool_from_text(text, path)
    if isinstance(dtype, T.DateType):
        return lambda text: _date_from_text(text, path)
    if isinstance(dtype, T.TimestampType):
        return lambda text: _timestamp_from_text(text, path)
    if isinstance(dtype, T.BinaryType):
        return lambda text: _binary_from_text(text, path)
    # Nested types have no CSV rendering we can trust; the column would be silently wrong.
    raise TypeError(f"row schema column `{path}` has type {dtype.simpleString()}, which format=csv cannot carry")


def csv_row_converter(schema: T.StructType) -> Callable[[list[str]], dict]:
    """Build a function from one CSV record (list of fields) to a dict matching ``schema``, by position.

    An empty field is NULL for every type but STRING (where it is the empty string).
    Raises :class:`TypedError` on a field count mismatch or a value that does not fit.
    """
    fields = [
        (f.name, _csv_converter(f.dataType, f.name), isinstance(f.dataType, T.StringType), f.nullable)
        for f in schema.fields
    ]
    width = len(fields)

    def conv(record: list[str]) -> dict:
        if len(record) != width:
            raise TypedError(f"CSV record has {len(record)} fields, the row schema has {width} columns")
        out: dict[str, Any] = {}
        for (name, field_conv, is_string, nullable), text in zip(fields, record):
            if text == "" and not is_string:
                if not nullable:
                    raise TypedError(f"column `{name}` is NOT NULL but the CSV field is empty")
                out[name] = None
            else:
                out[name] = field_conv(text)
        return out

    return conv


# -- typed columns in bulk -------------------------------------------------------------------------
#
# The same conversion as :func:`json_row_converter`, column by column over many rows: each row
# object is decoded once by msgspec into a Struct of ``Raw`` values (missing columns read as JSON
# null, extra keys ignored, the last of duplicate keys wins, as with the dict the converter uses).
# msgspec has validated every value, so what a value is shows in its bytes, read with numpy over
# the column's joined texts (:mod:`.jsontext`): its first byte, and whether it holds ``.``/``e``
# (integers, DECIMALs). STRINGs are unquoted and unescaped in bulk; integers, DECIMAL, DOUBLE with
# its "NaN"/"Infinity" strings go through Arrow casts, TIMESTAMP and DATE in CockroachDB's ISO form
# and BINARY in its ``\\x`` hex through Arrow kernels, ARRAY<STRING> through one msgspec call per
# column; values of other forms and other types use the per-value converter. A value the bulk path
# is not sure about marks its row "not done": the caller sends that message to the general path,
# which produces the exact value or the exact error.


def _bulk_imports():  # pyarrow and numpy are only needed here; keep the per-value module light
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    return np, pa, pc


# A column a row lacks reads as JSON null: the per-value converter treats both alike.
_MISSING = msgspec.Raw(b"null")


class _BulkSchema:
    """Per-row-schema constants: the Struct type rows decode into and each column's handler."""

    def __init__(self, schema: T.StructType, arrow_type: Any) -> None:
        names = [f"f{i}" for i in range(len(schema.fields))]
        self.struct = msgspec.defstruct(
            "_TypedRow",
            [(n, msgspec.Raw, _MISSING) for n in names],
            rename=dict(zip(names, schema.names)),
            gc=False,
        )
        # (the row Struct is made at run time, so mypy cannot read it as a type)
        self.decode = msgspec.json.Decoder(list[self.struct]).decode  # type: ignore[name-defined]
        self.decode_one = msgspec.json.Decoder(self.struct).decode
        self.getters = [operator.attrgetter(n) for n in names]
        self.fields = schema.fields
        self.arrow_type = arrow_type
        self.per_value = [_json_converter(f.dataType, f.name) for f in schema.fields]


_BULK_CACHE: dict[str, _BulkSchema] = {}
# The decoder passes the same StructType object for a row schema every time (its schema cache):
# found by identity, it spares the JSON rendering (0.4 ms a column with pyspark 4's collations).
_BY_OBJECT: dict[int, tuple[T.StructType, _BulkSchema]] = {}


def _bulk_schema(schema: T.StructType, arrow_type: Any) -> _BulkSchema:
    known = _BY_OBJECT.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    key = schema.json()
    found = _BULK_CACHE.get(key)
    if found is None:
        if len(_BULK_CACHE) > 64:
            _BULK_CACHE.clear()
            _BY_OBJECT.clear()
        found = _BULK_CACHE[key] = _BulkSchema(schema, arrow_type)
    if len(_BY_OBJECT) > 64:
        _BY_OBJECT.clear()
    _BY_OBJECT[id(schema)] = (schema, found)
    return found


def struct_column(images: Any, schema: T.StructType, arrow_type: Any) -> tuple[Any, Any]:
    """(Arrow struct array, per-row "not done" mask) for a string array of JSON row objects.

    ``images`` holds each row's exact JSON object text (null for no row image). Rows flagged "not
    done" must be decoded by the general path instead; the array holds nulls for them.
    """
    np, pa, pc = _bulk_imports()
    from .jsontext import texts_of

    m = len(images)
    if images.null_count == m:  # no row image at all (a changefeed without diff has no `before`)
        return pa.nulls(m, arrow_type), np.zeros(m, dtype=bool)
    bulk = _bulk_schema(schema, arrow_type)
    valid = images.is_valid().to_numpy(zero_copy_only=False) if images.null_count else None
    try:
        rows = _rows(images, valid, bulk, np, pa, pc)
    except (pa.ArrowException, msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
        return None, np.ones(m, dtype=bool)
    bad = np.zeros(m, dtype=bool)
    children = []
    for field, getter, conv, arrow_field in zip(bulk.fields, bulk.getters, bulk.per_value, arrow_type):
        values = list(map(getter, rows))
        text = texts_of(values, m)
        if text is None:
            return None, np.ones(m, dtype=bool)
        child, child_bad = _typed_child(values, text, field, conv, arrow_field.type, np, pa, pc)
        if child is None:
            return None, np.ones(m, dtype=bool)
        if valid is not None:
            child_bad &= valid  # no row image, no value to check
        bad |= child_bad
        children.append(child)
    mask = None if valid is None else pa.array(~valid)
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask), bad


def _rows(images: Any, valid: Any, bulk: _BulkSchema, np: Any, pa: Any, pc: Any) -> list:
    """Decode each row image into the row Struct ("{}" for none); raises what msgspec raises."""
    from .proofs import AT_ONCE

    m = len(images)
    offsets = np.frombuffer(images.buffers()[1], dtype=np.int32)[images.offset : images.offset + m + 1]
    if int(offsets[-1] - offsets[0]) < AT_ONCE * m:  # short rows: one call for them all
        filled = pc.fill_null(images, "{}") if valid is not None else images
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, m], pa.int32()), filled), ",")
        return bulk.decode(b"".join((b"[", joined[0].as_buffer(), b"]")))
    # Long rows: each read in place (two copies of them all would be fresh memory, ~2.4 us a 4 KB page).
    data = memoryview(images.buffers()[2])
    texts: list[Any] = list(map(data.__getitem__, map(slice, offsets[:-1].tolist(), offsets[1:].tolist())))
    if valid is not None:
        for i in np.flatnonzero(~valid).tolist():
            texts[i] = b"{}"
    return list(map(bulk.decode_one, texts))


def _typed_child(values: list, text: Any, field: Any, conv: Conv, arrow_type: Any, np: Any, pa: Any,
                 pc: Any) -> tuple[Any, Any]:  # fmt: skip
    """(Arrow array, "not done" mask) of one column: its raw ``values`` and their ``text``."""
    m = len(values)
    arr, first, lengths, null = text.arr, text.first, text.lengths, text.null
    bad = np.zeros(m, dtype=bool)
    if not field.nullable:
        bad |= null
    if null.all():  # no row has a value here (absent or null)
        return pa.nulls(m, arrow_type), bad
    dtype = field.dataType
    # The values are valid JSON (msgspec read them): a number starts with - or a digit, and has
    # no other bytes than -+.0-9eE; true starts with t, false with f.
    number = (first == ord("-")) | ((first >= ord("0")) & (first <= ord("9")))

    def checked(pattern: str) -> Any:
        ok = pc.match_substring_regex(arr, pattern).to_numpy(zero_copy_only=False)
        return ok | null

    def keeping(ok: Any) -> Any:
        """``arr`` null wherever the JSON is null or the value is left to the general path."""
        keep = ok & ~null
        return arr if keep.all() else _with_validity(arr, keep, pa, np)

    def inner() -> Any:
        """Return the texts without their first and last byte (a JSON string's quotes), as bytes."""
        return pc.binary_slice(arr.view(pa.binary()), 1, -1)

    def rest_per_value(out: Any, ok: Any) -> tuple[Any, Any]:
        """``out`` (null where not ``ok``) with the other non-null values converted one by one."""
        todo = ~ok & ~null
        if not todo.any():
            return out, bad
        where = np.flatnonzero(todo)
        sub, sub_bad = _per_value([values[i] for i in where.tolist()], field, conv, arrow_type, pa, np)
        if sub is None:
            return None, None
        bad[where] |= sub_bad
        return pc.replace_with_mask(out, pa.array(todo), sub), bad

    if isinstance(dtype, T.StringType):
        out, unsure = text.unquoted(first == ord('"'), ~null)
        return out, bad | unsure
    if type(dtype) in _INT_RANGES:
        lo, hi, _ = _INT_RANGES[type(dtype)]
        ok = (number & ~text.having(b".eE") & (lengths <= 20)) | null
        try:
            ints = pc.cast(keeping(ok), pa.int64())
        except pa.ArrowInvalid:  # beyond int64: let the general path say which
            return _per_value(values, field, conv, arrow_type, pa, np)
        if lo != -(2**63):
            inside = pc.and_(pc.greater_equal(ints, lo), pc.less_equal(ints, hi))
            inside = pc.fill_null(inside, True).to_numpy(zero_copy_only=False)
            ok &= inside
            if not inside.all():
                ints = pc.if_else(pa.array(inside), ints, pa.scalar(None, pa.int64()))
        return ints.cast(arrow_type), bad | ~ok
    if isinstance(dtype, T.DecimalType):
        ok = (number & ~text.having(b"eE")) | null
        try:
            return pc.cast(keeping(ok), arrow_type), bad | ~ok
        except pa.ArrowInvalid:  # too many digits or too much scale somewhere: find which
            return _per_value(values, field, conv, arrow_type, pa, np)
    if isinstance(dtype, T.DoubleType):
        quoted = first == ord('"')
        special = np.zeros(m, dtype=bool)
        if quoted.any():
            special = quoted & pc.is_in(arr, value_set=pa.array(_SPECIAL_TEXTS)).to_numpy(zero_copy_only=False)
        ok = number | special | null
        src = arr if not special.any() else pc.if_else(pa.array(special), inner().view(pa.string()), arr)
        keep = ok & ~null
        src = src if keep.all() else _with_validity(src, keep, pa, np)
        try:
            return pc.cast(src, pa.float64()), bad | ~ok
        except pa.ArrowInvalid:
            return _per_value(values, field, conv, arrow_type, pa, np)
    if isinstance(dtype, T.BooleanType):
        is_true = first == ord("t")
        ok = is_true | (first == ord("f")) | null
        keep = ok & ~null
        out = pa.array(is_true) if keep.all() else pa.array(is_true, mask=~keep)
        return out, bad | ~ok
    if isinstance(dtype, T.TimestampType):
        # "YYYY-MM-DD[T ]HH:MM:SS[.ffffff][Z]", UTC: what CockroachDB writes for TIMESTAMP(TZ). Arrow's
        # parser refuses the same impossible dates as datetime (a column holding one goes value by
        # value), but takes year 0, which the regex leaves out; other forms go value by value.
        ok = checked(_TS_PATTERN)
        src = _with_validity(text.without_zone(), ok & ~null, pa, np)
        try:
            out = pc.cast(pc.cast(src, pa.timestamp("us")), arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(values, field, conv, arrow_type, pa, np)
        return rest_per_value(out, ok)
    if isinstance(dtype, T.DateType):
        ok = checked(_DATE_PATTERN)
        src = pc.if_else(pa.array(ok & ~null), inner().view(pa.string()), pa.scalar(None, pa.string()))
        try:
            out = pc.cast(pc.cast(src, pa.timestamp("s")), pa.date32())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(values, field, conv, arrow_type, pa, np)
        return rest_per_value(out, ok)
    if isinstance(dtype, T.BinaryType):
        # CockroachDB's BYTES: "\\x" then hex digits, two a byte (JSON text ``"\\x0a1b"``).
        ok = checked(_HEX_PATTERN)
        hexes = pc.binary_slice(pc.if_else(pa.array(ok & ~null), arr.view(pa.binary()), pa.scalar(None, pa.binary())),
                                4, -1)  # fmt: skip
        hex_off = np.frombuffer(hexes.buffers()[1], dtype=np.int32)[hexes.offset : hexes.offset + m + 1]
        digits = (
            np.frombuffer(hexes.buffers()[2], dtype=np.uint8)[hex_off[0] : hex_off[-1]] if m else np.zeros(0, np.uint8)
        )
        halves = _hex_table()[digits]
        out_data = (halves[0::2] << 4) | halves[1::2]
        out = pa.BinaryArray.from_buffers(
            pa.binary(), m, [hexes.buffers()[0], pa.py_buffer(((hex_off - hex_off[0]) // 2).astype(np.int32)),
                             pa.py_buffer(out_data.astype(np.uint8))], offset=0,
        )  # fmt: skip
        return rest_per_value(out.cast(arrow_type), ok)
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.StringType):
        try:  # every item a string or null (other JSON items keep their text: value by value)
            lists = _STR_LISTS.decode(b"[" + b",".join(values) + b"]")
            return pa.array(lists, arrow_type), bad
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, pa.ArrowException):
            return _per_value(values, field, conv, arrow_type, pa, np)
    return _per_value(values, field, conv, arrow_type, pa, np)


def _with_validity(arr: Any, valid: Any, pa: Any, np: Any) -> Any:
    """``arr``'s values as a string array, null where not ``valid`` (its buffers shared)."""
    m = len(arr)
    null_count = m - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.StringArray.from_buffers(m, arr.buffers()[1], arr.buffers()[2], bitmap, null_count, arr.offset)


_STR_LISTS = msgspec.json.Decoder(list[list[str | None] | None])
_SPECIAL_TEXTS = ['"NaN"', '"Infinity"', '"-Infinity"']  # a DOUBLE's JSON strings (_SPECIAL_FLOATS)
_YEAR = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # datetime has no year 0
_TS_PATTERN = (
    r'^"' + _YEAR + r"-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r'(?:\.[0-9]{1,6})?[Zz]?"$'
)
_DATE_PATTERN = r'^"' + _YEAR + r'-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"$'
_HEX_PATTERN = r'^"\\\\x(?:[0-9a-fA-F]{2})*"$'


@functools.lru_cache(maxsize=1)
def _hex_table() -> Any:
    """Return the value of each ASCII hex digit (other bytes: never looked up, the regex saw to it)."""
    import numpy as np

    table = np.zeros(256, dtype=np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        table[c] = i
    for i, c in enumerate(b"ABCDEF"):
        table[c] = 10 + i
    return table


def _per_value(values: list, field: Any, conv: Conv, arrow_type: Any, pa, np) -> tuple[Any, Any]:
    """Convert one column with the per-value converter: exact for every type, slower."""
    m = len(values)
    bad = np.zeros(m, dtype=bool)
    out: list = [None] * m
    name = field.name
    for i, raw in enumerate(values):
        if raw is msgspec.UNSET:
            if not field.nullable:
                bad[i] = True
            continue
        raw = bytes(raw)
        if raw == b"null":
            if not field.nullable:
                bad[i] = True
            continue
        try:
            out[i] = conv(raw, name)
        except (TypedError, msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            bad[i] = True
    try:
        return pa.array(out, arrow_type), bad
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None, None
