"""``envelope=wrapped`` (the default): ``after``, with the fields the changefeed's options add.

Those are ``key``, ``topic``, ``before`` (``diff``), ``updated`` and ``mvcc_timestamp``.

The fast path takes CockroachDB's canonical Pub/Sub v2 wrapped bodies:
``{"Key":[...],"Value":{"after": {...}, "updated": "..."},"Topic":"t"}``, and those of the sink before
v25.2, compact and lowercase: ``{"key":[...],"value":{"after":{...}},"topic":"t"}``. Each body is decoded by
msgspec into a Struct whose sub-objects stay ``msgspec.Raw``; the layout is then proven with
arithmetic on whole columns (body length == sum of the parts + fixed punctuation, which also rules
out duplicate or unknown keys and any whitespace variation; a value that also carries ``key`` or
``topic``, rare, is rebuilt and compared instead), and the Arrow columns are built in bulk from the
raw bytes. What it cannot prove is left to the general path.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec import UNSET, Raw, UnsetType

from ...columns import (
    ARR_START,
    GET_KEY,
    GET_TOPIC,
    GET_VALUE,
    NULL_START,
    OBJ_START,
    const,
    first_bytes,
    hlc_micros_array,
    hlc_ok,
    raw_column,
    table_names,
    utf8_bad,
)
from ..common import Context, Row, fill_images_and_meta, op_from_images, table_from_topic, with_commit_time
from ..registry import BatchFast, Family, Part

_KEYS = frozenset(("after", "before", "key", "topic", "updated", "mvcc_timestamp"))


def _claims(d: dict[str, bytes], keys: set[str], env: str) -> bool:
    return env in ("auto", "wrapped") and "after" in d and keys <= _KEYS


def _decode(d: dict[str, bytes], raw: bytes, ctx: Context, env: str) -> list[Row]:
    row = Row("row", "wrapped")
    after, before = fill_images_and_meta(row, d, ctx)
    row.op = op_from_images(after, "before" in d, before)
    return [with_commit_time(row)]


def _refuse(d: dict[str, bytes]) -> str:
    if "after" not in d:
        return "envelope=wrapped: the value has no `after` field"
    return f"envelope=wrapped: unexpected field(s) {', '.join(sorted(set(d) - _KEYS))}"


# -- the fast path -----------------------------------------------------------------------------------


# gc=False: these hold no containers, and 200k GC-tracked objects per call cost more than the parse.
class _FValue(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    after: Raw
    before: Raw | UnsetType = UNSET
    key: Raw | UnsetType = UNSET  # key_in_value / topic_in_value: the wrapper's Key and Topic win
    mvcc_timestamp: str | UnsetType = UNSET
    topic: Raw | UnsetType = UNSET
    updated: str | UnsetType = UNSET


class _FWrap(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    Key: Raw
    Value: _FValue
    Topic: str


# The sink before v25.2 (changefeed.new_pubsub_sink_enabled=false): Go's json.Marshal, lowercase and
# compact throughout, {"key":K,"value":{"after":...},"topic":"t"}; same field names in Python.
class _FLegacyValue(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    after: Raw
    before: Raw | UnsetType = UNSET
    mvcc_timestamp: str | UnsetType = UNSET
    updated: str | UnsetType = UNSET


class _FLegacy(msgspec.Struct, forbid_unknown_fields=True, gc=False,
               rename={"Key": "key", "Value": "value", "Topic": "topic"}):  # fmt: skip
    Key: Raw
    Value: _FLegacyValue
    Topic: str


_FAST_DECODE = msgspec.json.Decoder(_FWrap).decode
_LEGACY_DECODE = msgspec.json.Decoder(_FLegacy).decode
_GET_AFTER, _GET_BEFORE, _GET_MVCC, _GET_UPDATED = (
    operator.attrgetter(a) for a in ("after", "before", "mvcc_timestamp", "updated")
)
# Punctuation of the canonical layout: the sink's compact wrapper around the encoder's ", "/": ".
_WRAP_FIXED = len(b'{"Key":') + len(b',"Value":') + len(b',"Topic":"') + len(b'"}')
_VALUE_FIXED = len(b'{"after": ') + len(b"}")
_OPTIONAL_FIXED = {
    "before": len(b', "before": '),
    "mvcc_timestamp": len(b', "mvcc_timestamp": "') + 1,
    "updated": len(b', "updated": "') + 1,
}
# The legacy layout has the same wrapper lengths ("key" for "Key") and no spaces in its value: one
# byte less after "after", two less before each optional field. Compact, its length check is exact.
_LEGACY_LESS = 1
_LEGACY_LESS_OPTIONAL = 2


def _legacy_or_none(body: bytes) -> _FLegacy | None:
    if body.startswith(b'{"key":'):
        try:
            return _LEGACY_DECODE(body)
        except Exception:  # noqa: BLE001 - anything unusual is the general path's business
            pass
    return None


def _parse(bodies: list[bytes]) -> tuple[list[_FWrap | _FLegacy | None], list[int], int]:
    """Return each body decoded, the positions of those of neither layout (None), and how many are legacy.

    One pass: a body that fails (a resolved message, another envelope) costs its own decode only.
    """
    parsed: list[_FWrap | _FLegacy | None] = []
    append = parsed.append
    rest = iter(bodies)
    failed: list[int] = []
    legacy = 0
    while True:
        try:
            for body in rest:
                append(_FAST_DECODE(body))
            return parsed, failed, legacy
        except Exception:  # noqa: BLE001 - anything unusual is the legacy layout's or the general path's
            found = _legacy_or_none(body)
            if found is None:
                failed.append(len(parsed))
            else:
                legacy += 1
            append(found)


def _optional_lengths(
    values: Sequence[Raw | bytes | str | UnsetType], fixed: int
) -> tuple[np.ndarray | int, np.ndarray | None]:
    """(length contribution, presence mask: None when all are present) of an optional field."""
    n = len(values)
    absent = values.count(UNSET)
    if absent == n:
        return 0, np.zeros(n, dtype=bool)
    sized = cast("Sequence[Raw | bytes | str]", values)  # (len is only taken of the present values)
    if absent == 0:
        return np.fromiter(map(len, sized), dtype=np.int64, count=n) + fixed, None
    present = _present(values)
    lengths = np.zeros(n, dtype=np.int64)
    lengths[present] = np.fromiter(map(len, itertools.compress(sized, present.tolist())), dtype=np.int64,
                                   count=n - absent) + fixed  # fmt: skip
    return lengths, present


def _present(values: Sequence[Any]) -> np.ndarray:
    """Mask of the ``values`` that are not UNSET."""
    n = len(values)
    absent = values.count(UNSET)
    if absent in (0, n):
        return np.full(n, absent == 0)
    return np.fromiter(map(operator.is_not, values, itertools.repeat(UNSET)), dtype=bool, count=n)


def _before_column(
    raws: Sequence[Raw | bytes | UnsetType], m: int, present: np.ndarray | None, lengths: np.ndarray | None
) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """Build the ``before`` images of canonical wrapped bodies.

    ``present``: which bodies have the field (None: all); ``lengths``: the images' lengths, when
    known. Returns (column, null mask, which bodies had the field at all, which are not canonical).
    """
    bad = np.zeros(m, dtype=bool)
    if present is not None and not present.any():
        return pa.nulls(m, pa.string()), np.ones(m, dtype=bool), np.zeros(m, dtype=bool), bad
    if present is not None:
        raws = [b if b is not UNSET else b"null" for b in raws]
        lengths = None
    before_arr, before_off, before_data = raw_column(raws, lengths=lengths)
    before_first = first_bytes(before_off, before_data)
    before_null = before_first == NULL_START
    bad |= ~((before_first == OBJ_START) | before_null)
    utf8 = utf8_bad(before_arr, raws)
    if utf8 is not None:
        bad |= utf8
    if present is not None:
        before_null |= ~present
    before_arr = pa.StringArray.from_buffers(
        m, before_arr.buffers()[1], before_arr.buffers()[2],
        pa.py_buffer(np.packbits(~before_null, bitorder="little")),
    )  # fmt: skip
    had_before = np.ones(m, dtype=bool) if present is None else present
    return before_arr, before_null, had_before, bad


def _wrapped_columns(
    m: int,
    topics: list[str],
    key_arr: pa.Array,
    after_arr: pa.Array,
    after_null: np.ndarray,
    before_arr: pa.Array,
    before_null: np.ndarray,
    had_before: np.ndarray,
    hlc: dict[str, pa.Array],
) -> dict[str, pa.Array]:
    """Build the output columns of ``m`` canonical wrapped bodies, from their proven raw columns."""
    # op: after null -> d; with before: before null -> c else u; an upsert without before -> u.
    op_code = np.where(after_null, 2, np.where(had_before & before_null, 0, 1)).astype(np.int8)
    op = pa.array(["c", "u", "d"], pa.string()).take(pa.array(op_code))
    after_arr = pa.StringArray.from_buffers(
        m, after_arr.buffers()[1], after_arr.buffers()[2], pa.py_buffer(np.packbits(~after_null, bitorder="little"))
    )
    topic = pa.array(topics, pa.string())
    table_name = table_names(topic, table_from_topic)
    if not hlc["updated"].null_count:
        commit = hlc_micros_array(hlc["updated"])
    else:
        commit = hlc_micros_array(pc.fill_null(hlc["updated"], "0.0000000000"))
        commit = pc.if_else(pc.is_null(hlc["updated"]), pa.scalar(None, commit.type), commit)
    if hlc["mvcc_timestamp"].null_count < m and hlc["updated"].null_count:
        mvcc_commit = hlc_micros_array(pc.fill_null(hlc["mvcc_timestamp"], "0.0000000000"))
        mvcc_commit = pc.if_else(pc.is_null(hlc["mvcc_timestamp"]), pa.scalar(None, commit.type), mvcc_commit)
        commit = pc.coalesce(commit, mvcc_commit)
    return {
        "kind": const("row", m),
        "envelope": const("wrapped", m),
        "topic": topic,
        "table_name": table_name,
        "key": key_arr,
        "op": op,
        "before": before_arr,
        "after": after_arr,
        "updated": hlc["updated"],
        "mvcc_timestamp": hlc["mvcc_timestamp"],
        "commit_time": commit,
    }


def _proven(bodies: list[bytes]) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Decode what can be proven canonical. Returns (message indices handled, columns for them)."""
    n = len(bodies)
    parsed, failed, legacy_count = _parse(bodies)
    idx = np.arange(n)
    if failed:
        keep_mask = np.ones(n, dtype=bool)
        keep_mask[failed] = False
        idx = idx[keep_mask]
        keep = keep_mask.tolist()
        parsed = list(itertools.compress(parsed, keep))
        bodies = list(itertools.compress(bodies, keep))
    if not parsed:
        return idx, {}

    values = list(map(GET_VALUE, parsed))
    cols: dict[str, list] = {
        "key": list(map(GET_KEY, parsed)),
        "topic": list(map(GET_TOPIC, parsed)),
        "after": list(map(_GET_AFTER, values)),
        "before": list(map(_GET_BEFORE, values)),
        "mvcc_timestamp": list(map(_GET_MVCC, values)),
        "updated": list(map(_GET_UPDATED, values)),
    }
    del values
    m = len(idx)
    lengths = {name: np.fromiter(map(len, cols[name]), dtype=np.int64, count=m) for name in ("key", "topic", "after")}
    expected = lengths["key"] + lengths["topic"] + lengths["after"] + (_WRAP_FIXED + _VALUE_FIXED)
    present: dict[str, np.ndarray | None] = {}  # which bodies have each optional field (None: all)
    for name, fixed in _OPTIONAL_FIXED.items():
        contribution, present[name] = _optional_lengths(cols[name], fixed)
        expected += contribution
        if name == "before" and present[name] is None:
            lengths["before"] = np.asarray(contribution) - fixed  # (raw_column needs them again)
    if legacy_count:
        is_legacy = np.fromiter(map(isinstance, parsed, itertools.repeat(_FLegacy)), dtype=bool, count=m)
        less = np.full(m, _LEGACY_LESS, dtype=np.int64)
        for name in _OPTIONAL_FIXED:
            less += _LEGACY_LESS_OPTIONAL * _present(cols[name])
        expected -= np.where(is_legacy, less, 0)
    good = np.fromiter(map(len, bodies), dtype=np.int64, count=m) == expected
    if not good.all():
        for i in np.flatnonzero(~good).tolist():
            good[i] = _in_value_proven(parsed[i], bodies[i])
    del parsed

    while True:
        if not good.all():
            keep_list = good.tolist()
            idx = idx[good]
            cols = {k: list(itertools.compress(v, keep_list)) for k, v in cols.items()}
            lengths = {k: v[good] for k, v in lengths.items()}
            present = {k: None if v is None else v[good] for k, v in present.items()}
            m = len(idx)
        if m == 0:
            return idx, {}
        bad = np.zeros(m, dtype=bool)
        key_arr, key_off, key_data = raw_column(cols["key"], lengths=lengths["key"])
        bad |= first_bytes(key_off, key_data) != ARR_START
        after_arr, after_off, after_data = raw_column(cols["after"], lengths=lengths["after"])
        after_first = first_bytes(after_off, after_data)
        after_null = after_first == NULL_START
        bad |= ~((after_first == OBJ_START) | after_null)
        for raws, arr in ((cols["key"], key_arr), (cols["after"], after_arr)):
            utf8 = utf8_bad(arr, raws)
            if utf8 is not None:
                bad |= utf8
        before_arr, before_null, had_before, before_bad = _before_column(
            cols["before"], m, present["before"], lengths.get("before")
        )
        bad |= before_bad
        hlc: dict[str, pa.Array] = {}
        for name in ("updated", "mvcc_timestamp"):
            vals, mask = cols[name], present[name]
            if mask is not None and not mask.any():
                hlc[name] = pa.nulls(m, pa.string())
                continue
            arr = pa.array(vals if mask is None else [None if v is UNSET else v for v in vals], pa.string())
            bad |= ~hlc_ok(arr)
            hlc[name] = arr
        if not bad.any():
            break
        good = ~bad

    return idx, _wrapped_columns(
        m, cols["topic"], key_arr, after_arr, after_null, before_arr, before_null, had_before, hlc
    )


def _in_value_proven(parsed: _FWrap | _FLegacy | None, body: bytes) -> bool:
    """Whether a body with ``key`` or ``topic`` inside its value is exactly its canonical layout.

    The length proof counts neither (with them, a repeated member could hide in the spaces the
    layout has), so such a body, rare, is rebuilt in CockroachDB's layout (keys sorted) and compared.
    The wrapper's Key and Topic are what the general path outputs; these are only checked as it
    checks them (a key array, object or null, a topic string; UTF-8).
    """
    if not isinstance(parsed, _FWrap):
        return False
    value = parsed.Value
    vkey, vtopic = value.key, value.topic
    if vkey is UNSET and vtopic is UNSET:
        return False
    parts = [b'{"Key":', parsed.Key, b',"Value":{"after": ', value.after]
    for name, text in (("before", value.before), ("key", vkey), ("mvcc_timestamp", value.mvcc_timestamp),
                       ("topic", vtopic), ("updated", value.updated)):  # fmt: skip
        if text is not UNSET:
            parts += [b', "' + name.encode() + b'": ', msgspec.json.encode(text) if isinstance(text, str) else text]
    parts += [b'},"Topic":', msgspec.json.encode(parsed.Topic), b"}"]
    if b"".join(parts) != body:
        return False
    for text, kinds in ((vkey, b"[{n"), (vtopic, b'"')):
        if text is not UNSET:
            raw = bytes(text)
            if not raw or raw[0] not in kinds:
                return False
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return False
    return True


def _likely(first: bytes) -> int:
    """2 when the first body has the canonical wrapped layout's signature."""
    return 2 if first.startswith(b'{"Key":') and b',"Value":{"after": ' in first and b'"op": ' not in first else 0


def _fast(bodies: list[bytes], envelope: str) -> list[Part]:
    idx, cols = _proven(bodies)
    return [(idx, cols)] if len(idx) else []


FAMILY = Family(
    order=80, names=("wrapped",), claims=_claims, decode=_decode, refuse=_refuse,
    fast=BatchFast(envelopes=("auto", "wrapped"), likely=_likely, run=_fast),
)  # fmt: skip
