"""Learned layouts: what an object's layout is, where it sits in a body, and learning it from one.

Bare, enriched and Debezium bodies carry objects whose keys the decoder cannot know in advance (the
row's columns, the ``source`` block of each connector). A *layout* is learned from one body of the
batch (its keys, in order, :func:`learn`) and becomes a msgspec Struct of ``Raw`` fields, all
required, unknown keys refused (:class:`Layout`); the :class:`Frame` says where it sits in a body
(the whole body, or the ``Value`` of CockroachDB's v2 Pub/Sub wrapper; a ``payload`` beside a
``schema`` or not) and how its producer spaces it. The bodies that decode into a layout are then
proven to be its canonical bytes (:mod:`.proofs`) before their values are used.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import Raw

Accept = Callable[[tuple[str, ...]], bool]  # which learned layouts (their keys, in order) a caller takes

CRDB_STYLE = (b", ", b": ")  # CockroachDB's JSON encoder: {"a": 1, "b": 2}
COMPACT_STYLE = (b",", b":")  # Debezium's JSON converter: {"a":1,"b":2}
SIMPLE_KEY = re.compile(r'[^\x00-\x20"\\\x7f]+\Z')  # a key whose JSON is its text in quotes, no space


@dataclasses.dataclass(frozen=True)
class Frame:
    """Where learned layouts sit in a body and how its producer spaces them.

    Either the ``Value`` of CockroachDB's v2 Pub/Sub wrapper with the encoder's ``", "``/``": "``
    (:data:`V2_CRDB`), or the whole body, compact (:data:`COMPACT`, Debezium's JSON converter); with
    ``payload``, the layout is the ``payload`` of ``{"schema": S, "payload": {...}}`` there
    (:data:`V2_SCHEMA`: the enriched envelope with ``enriched_properties=schema``;
    :data:`COMPACT_SCHEMA`: Debezium with schemas on, TiCDC with or without them). Objects nested in
    a body's values are matched in a frame of their own (no wrapper, their producer's style).
    """

    wrapper: bool
    style: tuple[bytes, bytes]
    payload: bool = False

    def likely(self, first: bytes) -> int:
        """1 when ``first`` has this frame's outer shape, else 0."""
        if first.startswith(b'{"Key":') != self.wrapper:
            return 0
        if self.wrapper:
            return int((b',"Value":{"payload": ' in first) == self.payload)
        return int(first.startswith((b'{"schema":', b'{"payload":')) == self.payload)


V2_CRDB = Frame(wrapper=True, style=CRDB_STYLE)
V2_SCHEMA = Frame(wrapper=True, style=CRDB_STYLE, payload=True)
COMPACT = Frame(wrapper=False, style=COMPACT_STYLE)
COMPACT_SCHEMA = Frame(wrapper=False, style=COMPACT_STYLE, payload=True)


class Layout:
    """One learned object layout (optionally inside the v2 ``{"Key","Value","Topic"}`` wrapper).

    ``decode``: a body into its Struct; ``getters``: a getter per key, on the object's Struct;
    ``prefixes`` and ``end``: the canonical bytes around the values (the wrapper's Key and Topic
    count as values), for the proofs; ``by_length``: whether the canonical length alone proves a
    body (see below).
    """

    __slots__ = ("by_length", "decode", "end", "getters", "keys", "outer", "prefixes", "wrapper")

    def __init__(self, keys: tuple[str, ...], style: tuple[bytes, bytes], wrapper: bool,
                 outer: tuple[str, ...] | None = None) -> None:  # fmt: skip
        sep, colon = style
        # When may the byte-for-byte rebuild be skipped for a length check? A body that decodes
        # into this Struct holds only these keys, each at least once (values: the last occurrence).
        # Its length is the canonical length, plus what each repeated member adds (at least its
        # key, colon, comma and a one-byte value), plus escape and whitespace variants (never
        # shorter), minus the canonical spaces it leaves out. If every possible repeated member is
        # longer than all the canonical spaces together, "same length" means no key repeats (the
        # general path's duplicate check) and the values read are the only ones. The compact
        # layout has no spaces, so it always qualifies; CockroachDB's ", "/": " layout qualifies
        # for few keys. Bare rows never skip: the general path rebuilds them in body key order.
        spaces = (len(sep) - 1) * max(len(keys) - 1, 0) + (len(colon) - 1) * len(keys)
        smallest = min((len(msgspec.json.encode(k)) + 3 for k in keys), default=0)
        if wrapper:
            smallest = min(smallest, len(b'"Key":1,'))
        self.by_length = smallest > spaces and "__crdb__" not in keys and outer is None
        # Otherwise, when the values are only read by key (not bare), spaceless_equal proves that
        # no key repeats; bare rows get the byte-for-byte rebuild (or the bare family's quick proof).
        names = [f"f{i}" for i in range(len(keys))]
        struct = msgspec.defstruct(
            "_Learned", [(n, Raw) for n in names], rename=dict(zip(names, keys)), forbid_unknown_fields=True, gc=False
        )
        encoded = [msgspec.json.encode(k) for k in keys]
        prefixes = [(b"{" if i == 0 else sep) + e + colon for i, e in enumerate(encoded)]
        self.keys = keys
        self.wrapper = wrapper
        self.outer = outer
        self.getters = [operator.attrgetter(n) for n in names]
        if outer is not None:  # {"schema": S, "payload": <this layout>} (S: any JSON), in ``outer``'s order
            struct = msgspec.defstruct(
                "_LearnedPayload", [(k, struct if k == "payload" else Raw) for k in outer], forbid_unknown_fields=True,
                gc=False,
            )  # fmt: skip
        if wrapper:
            struct = msgspec.defstruct(
                "_LearnedWrap", [("Key", Raw), ("Value", struct), ("Topic", str)], forbid_unknown_fields=True, gc=False
            )
            prefixes = [b'{"Key":', b',"Value":' + prefixes[0], *prefixes[1:], b'},"Topic":']
        self.decode = msgspec.json.Decoder(struct).decode
        self.prefixes = prefixes
        self.end = b"}"


@functools.lru_cache(maxsize=256)
def layout_of(keys: tuple[str, ...], style: tuple[bytes, bytes], wrapper: bool,
              outer: tuple[str, ...] | None = None) -> Layout:  # fmt: skip
    return Layout(keys, style, wrapper, outer)


def decode_or_none(decode: Callable[[Any], Any], body: bytes | Raw) -> Any:
    try:
        return decode(body)
    except Exception:  # noqa: BLE001 - not this layout: the next one, or the general path
        return None


_OBJ_DECODE = msgspec.json.Decoder(dict[str, Raw]).decode
_WRAPPER_KEYS = ["Key", "Value", "Topic"]
_PAYLOAD_KEYS = frozenset(("payload", "schema"))
_NONE = (None, None)


def learn(raw: bytes | Raw, frame: Frame) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """Learn a layout from the body ``raw`` in ``frame``: (its keys, the outer keys of a payload frame).

    The keys are those of the body's object, or inside the v2 wrapper of its ``Value``, or in a
    payload frame of the ``payload`` of ``{"schema": S, "payload": {...}}`` there (the outer keys:
    that object's, None in other frames). (None, None) when ``raw`` is not of that form.
    """
    try:
        obj = _OBJ_DECODE(raw)
        if frame.wrapper:
            if list(obj) != _WRAPPER_KEYS:
                return _NONE
            obj = _OBJ_DECODE(obj["Value"])
        if not frame.payload:
            return tuple(obj), None
        outer = tuple(obj)
        if "payload" not in obj or not _PAYLOAD_KEYS.issuperset(outer) or bytes(obj["payload"])[:1] != b"{":
            return _NONE
        return tuple(_OBJ_DECODE(obj["payload"])), outer
    except Exception:  # noqa: BLE001 - not this layout: the general path decides
        return _NONE


def learn_keys(raw: bytes | Raw) -> tuple[str, ...] | None:
    """Return the keys of the object ``raw``, in order, or None (not an object)."""
    try:
        return tuple(_OBJ_DECODE(raw))
    except Exception:  # noqa: BLE001 - not this layout: the general path decides
        return None
