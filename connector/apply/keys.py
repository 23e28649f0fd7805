"""The key of a Debezium or TiCDC change: where the producer put it, or where the user says it is.

A Debezium value carries no key: the key is the Kafka record's key, which reaches Pub/Sub as

* the **ordering key** with Debezium Server's Pub/Sub sink (``debezium.sink.pubsub.ordering.enabled``,
  true by default: the record key's JSON text, ``{"schema":...,"payload":{"id":1}}`` or ``{"id":1}``);
* the **``key`` attribute** when a Kafka topic is bridged to Pub/Sub by Google's Pub/Sub Kafka
  connector (TiCDC has no Pub/Sub sink: its Debezium protocol writes the key to Kafka's).

Or the user names the key columns (``key_columns={"users": ["id"]}``), which then win. Nothing is
guessed: a key from the message must be a JSON object of columns that the row image holds with the
same values (an ``ordering.key`` set to a constant, or Debezium Server's ``default`` for an event
without a key, is no key), and a change whose key cannot be found is refused with the reason.

Whatever its source, the key is written as the JSON array of the key columns' values, as the row
image has them (``[1]``, ``["amsterdam", "6f0c..."]``): one text per row, like CockroachDB's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from .positions import Refused

__all__ = ["debezium_key"]

_OBJ = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _image(text: str) -> dict[str, msgspec.Raw]:
    try:
        return _OBJ.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refused(f"the row image is not a JSON object ({exc})") from None


def _key_object(text: str, where: str) -> dict[str, msgspec.Raw]:
    """Return the key columns of a Debezium record key's JSON text (with or without its schema)."""
    hint = ""
    if text == "default":
        hint = " (Debezium Server's ordering key for an event without a key: a table without a primary key?)"
    try:
        obj = _OBJ.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Refused(
            f"the {where} {_short(text)!r} is not a Debezium key (a JSON object of key columns){hint}; "
            "pass key_columns={table: [...]}"
        ) from None
    if "payload" in obj and set(obj) <= {"payload", "schema"}:
        try:
            obj = _OBJ.decode(bytes(obj["payload"]))
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Refused(f"the {where}'s `payload` is not a JSON object of key columns: {_short(text)!r}") from None
    if not obj:
        raise Refused(f"the {where} {_short(text)!r} names no key column; pass key_columns={{table: [...]}}")
    return obj


def debezium_key(
    image_text: str | None,
    key_columns: Sequence[str] | None,
    attributes: Mapping[str, str] | None,
    ordering_key: str | None,
) -> str:
    """Return the key text of a change whose row image (``after``, or ``before`` for a delete) is ``image_text``.

    ``key_columns`` (the user's) first, else the ``key`` attribute, else the ordering key. Raises
    :class:`Refused` with the reason when none gives a key the row image agrees with.
    """
    if image_text is None:
        raise Refused("no row image to read the key from (a delete without `before`)")
    image = _image(image_text)
    if key_columns:
        missing = [c for c in key_columns if c not in image]
        if missing:
            raise Refused(f"key column `{missing[0]}` (key_columns) is not in the row image")
        return "[" + ", ".join(bytes(image[c]).decode() for c in key_columns) + "]"
    attr = (attributes or {}).get("key")
    source, where = (attr, "`key` attribute") if attr else (ordering_key, "ordering key")
    if not source:
        raise Refused(
            "no key: a Debezium value carries none. Publish with the record key as the ordering key "
            "(Debezium Server's Pub/Sub sink does, debezium.sink.pubsub.ordering.enabled=true) or in a "
            "`key` attribute (Google's Pub/Sub Kafka connector), or pass key_columns={table: [...]}"
        )
    key = _key_object(source, where)
    for name, raw in key.items():
        have = image.get(name)
        if have is None:
            raise Refused(f"the {where} names `{name}`, which the row image does not hold: {_short(source)!r}")
        if bytes(have) != bytes(raw) and _ANY.decode(bytes(have)) != _ANY.decode(bytes(raw)):
            raise Refused(
                f"the {where} gives `{name}` = {bytes(raw).decode()}, the row image "
                f"{_short(bytes(have).decode())}: not this row's key"
            )
    return "[" + ", ".join(bytes(image[c]).decode() for c in key) + "]"
