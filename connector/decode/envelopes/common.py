"""What every envelope family shares: the row it fills, the error it raises and the field readers.

Sub-objects stay as their exact JSON bytes (``msgspec.Raw``), so row values keep the text
CockroachDB sent (``26.30`` stays ``26.30``). Every reader raises :class:`Bad` with a reason that
names the field and the problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import Raw

from ..hlc import HLC, hlc_to_micros

_OBJ = msgspec.json.Decoder(dict[str, Raw])
LIST = msgspec.json.Decoder(list[Raw])  # a JSON array, its items kept as their exact text
_ANY = msgspec.json.Decoder()
WS = b" \t\n\r"


class Bad(Exception):
    """The message cannot be decoded; ``str(exc)`` says which field and why."""


class Row:
    """One decoded change row, before it becomes Arrow columns."""

    __slots__ = (
        "after",
        "before",
        "commit_us",
        "envelope",
        "key",
        "kind",
        "mvcc_timestamp",
        "op",
        "resolved",
        "source",
        "table_name",
        "topic",
        "updated",
    )  # fmt: skip

    def __init__(self, kind: str, envelope: str) -> None:
        self.kind = kind
        self.envelope = envelope
        self.topic: str | None = None
        self.table_name: str | None = None
        self.key: str | None = None
        self.op: str | None = None
        # The images: exact JSON text, or typed values (row schema, format=csv); None is SQL NULL (absent or JSON null)
        self.before: bytes | dict[str, Any] | None = None
        self.after: bytes | dict[str, Any] | None = None
        self.updated: str | None = None
        self.mvcc_timestamp: str | None = None
        self.commit_us: int | None = None
        self.resolved: str | None = None
        self.source: str | None = None


class Context:
    """Per-call settings for the general decoder."""

    __slots__ = ("convert", "csv_convert", "envelope")

    def __init__(
        self,
        envelope: str,
        convert: Callable[[bytes], Any] | None = None,
        csv_convert: Callable[[list[str]], dict] | None = None,
    ) -> None:
        self.envelope = envelope
        self.convert = convert
        self.csv_convert = csv_convert


def kind_of(raw: bytes) -> str:
    """Return the JSON type a value's first byte announces, for error messages."""
    c = raw[:1]
    return {b"{": "object", b"[": "array", b'"': "string", b"t": "boolean", b"f": "boolean", b"n": "null"}.get(
        c, "number"
    )


def _nonws(buf: bytes) -> int:
    return len(buf.translate(None, WS))


def parse_object(buf: bytes, what: str) -> dict[str, bytes]:
    """Decode a JSON object into {key: exact value bytes}, rejecting duplicate keys.

    Duplicate keys are ambiguous (JSON parsers disagree on which wins), so at the envelope level
    they make the message malformed. msgspec keeps the last one silently; we detect the loss by
    counting non-whitespace bytes: the object's own bytes must equal its punctuation plus its keys
    (re-encoded minimally) plus its values. Escaped keys also differ, and get an exact re-check.
    """
    try:
        decoded = _OBJ.decode(buf)
    except RecursionError:
        raise Bad(f"{what}: JSON nested too deep") from None
    except msgspec.ValidationError:
        raise Bad(f"{what} must be a JSON object, got {describe(buf)}") from None
    except (msgspec.DecodeError, ValueError) as exc:
        raise Bad(f"{what}: invalid JSON ({exc})") from None
    out = {k: bytes(v) for k, v in decoded.items()}
    expected = 2 + max(len(out) - 1, 0) + sum(_nonws(msgspec.json.encode(k)) + 1 + _nonws(v) for k, v in out.items())
    if expected != _nonws(bytes(buf)):
        dup = _duplicate_key(bytes(buf))
        if dup is not None:
            raise Bad(f"{what}: duplicate key {dup!r} (ambiguous)")
    return out


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]', re.S)


def _duplicate_key(buf: bytes) -> str | None:
    """Exact (slow) check: the first key that appears twice at the top level of ``buf``."""
    depth = 0
    seen: set[str] = set()
    previous: bytes | None = None
    for m in _TOKENS.finditer(buf):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif tok == b":" and depth == 1 and previous is not None:
            key = msgspec.json.decode(previous, type=str)
            if key in seen:
                return key
            seen.add(key)
        previous = tok if tok[:1] == b'"' else None
    return None


def describe(buf: bytes) -> str:
    """Describe a body in words: ``nothing``, ``invalid JSON`` or ``a JSON <type>``."""
    stripped = bytes(buf).strip(WS)
    if not stripped:
        return "nothing"
    try:
        _ANY.decode(stripped)
    except RecursionError:
        return "JSON nested too deep"
    except Exception:  # noqa: BLE001 - whatever the parser refuses is invalid JSON
        return "invalid JSON"
    return f"a JSON {kind_of(stripped)}"


def short(raw: bytes, limit: int = 40) -> str:
    text = raw.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "..."


def string_field(d: dict[str, bytes], name: str, where: str) -> str | None:
    raw = d.get(name)
    if raw is None:
        return None
    if raw[:1] != b'"':
        raise Bad(f"{where}`{name}` must be a string, got {kind_of(raw)} {short(raw)}")
    return msgspec.json.decode(raw, type=str)


def hlc_field(d: dict[str, bytes], name: str, where: str) -> str | None:
    value = string_field(d, name, where)
    if value is not None and not HLC.match(value):
        raise Bad(f'{where}`{name}` must be an HLC timestamp like "1701102296662969433.0000000000", got {value!r}')
    return value


def object_or_null(d: dict[str, bytes], name: str, where: str) -> bytes | None:
    raw = d.get(name)
    if raw is None or raw == b"null":
        return None
    if raw[:1] != b"{":
        raise Bad(f"{where}`{name}` must be an object or null, got {kind_of(raw)} {short(raw)}")
    return raw


def key_text(raw: bytes | None, where: str) -> str | None:
    if raw is None or raw == b"null":
        return None
    if raw[:1] not in (b"[", b"{"):
        raise Bad(f"{where} must be a JSON array or object, got {kind_of(raw)} {short(raw)}")
    return raw.decode("utf-8")


def int_field(d: dict[str, bytes], name: str) -> int | None:
    raw = d.get(name)
    if raw is None or not re.fullmatch(rb"-?[0-9]+", raw):
        return None
    return int(raw)


def schema_name(raw: bytes) -> str | None:
    """Return the name a ``{"schema": ..., "payload": ...}`` value's schema gives, or None.

    The name is the schema's ``name`` when that is a JSON string, else None (also for a schema that
    is not an object). A schema object must parse: raises :class:`Bad` on a repeated key.
    """
    if raw[:1] != b"{":
        return None
    schema = parse_object(raw, "`schema`")
    return string_field(schema, "name", "`schema.`") if schema.get("name", b"")[:1] == b'"' else None


def table_from_topic(topic: str | None) -> str | None:
    """Return the table a CockroachDB topic names.

    ``table`` -> table; ``table.family`` (column families) -> table; ``db.schema.table`` and
    ``db.schema.table.family`` (full_table_name) -> table. A custom ``topic_name`` is returned
    as is when it has no dot (we cannot know the table behind it).
    """
    if not topic:
        return topic or None
    parts = topic.split(".")
    if len(parts) == 1:
        return topic
    if len(parts) == 2:
        return parts[0]
    return parts[2]


def convert(raw: bytes | None, ctx: Context, where: str) -> Any:
    """Return a row image as the caller asked for it: exact JSON text, or typed (``rowSchema``)."""
    if raw is None or ctx.convert is None:
        return raw
    from ..typed import TypedError

    try:
        return ctx.convert(raw)
    except TypedError as exc:
        raise Bad(f"{where}: {exc}") from None
    except RecursionError:
        raise Bad(f"{where}: JSON nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise Bad(f"{where}: {exc}") from None


def op_from_images(after: bytes | None, before_present: bool, before: bytes | None) -> str:
    """Return the op a row's images imply: no ``after`` is a delete; with ``diff``, no ``before`` a create."""
    if after is None:
        return "d"
    if before_present:
        return "c" if before is None else "u"
    return "u"


def with_commit_time(row: Row) -> Row:
    """commit_time from the row's HLC: ``updated`` when present, else ``mvcc_timestamp``."""
    stamp = row.updated or row.mvcc_timestamp
    row.commit_us = hlc_to_micros(stamp) if stamp else None
    return row


def fill_images_and_meta(row: Row, d: dict[str, bytes], ctx: Context) -> tuple[bytes | None, bytes | None]:
    """Fill the fields wrapped and enriched values share: row images, key, topic and HLC timestamps.

    Returns the raw ``after``/``before`` so the caller can derive the op from them.
    """
    after = object_or_null(d, "after", "")
    before = object_or_null(d, "before", "")
    row.after = convert(after, ctx, "after")
    row.before = convert(before, ctx, "before")
    row.key = key_text(d.get("key"), "`key`")
    row.topic = string_field(d, "topic", "")
    row.updated = hlc_field(d, "updated", "")
    row.mvcc_timestamp = hlc_field(d, "mvcc_timestamp", "")
    return after, before
