"""CockroachDB's changefeed messages from row changes, byte for byte as its Pub/Sub sink lays them out.

The encoder behind :class:`~crdb_pubsub.tools.simulator.ChangefeedSimulator` (the movr tables)
and :mod:`crdb_pubsub.testing` (a user's rows): ``options`` are the changefeed's (see
:func:`~crdb_pubsub.tools.simulator.messages.validate`), ``tables`` the tables it watches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from .clock import HLC
from .encoding import crdb_json, json_string
from .messages import SimMessage, _Options, source_schema, struct_schema
from .tables import DATABASE, SCHEMA, Table

__all__ = ["CockroachEncoder"]


class CockroachEncoder:
    """Encodes the changes of ``tables`` under one changefeed's ``options``."""

    def __init__(self, options: _Options, source_static: Mapping[str, Any], tables: Mapping[str, Table]) -> None:
        self.options = options
        self._source_static = dict(source_static)
        self.tables = dict(tables)

    # ---- topics
    def _base_topic(self, table: str) -> str:
        return f"{DATABASE}.{SCHEMA}.{table}" if self.options.full_table_name else table

    def families(self, table: str) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
        t = self.tables[table]
        if self.options.column_families and t.families:
            return tuple((name, cols) for name, cols in t.families)
        return ((None, t.column_names),)

    def topic(self, table: str, family: str | None) -> str:
        if self.options.topic_name:
            return self.options.topic_name
        base = self._base_topic(table)
        return f"{base}.{family}" if family else base

    def topics(self) -> list[str]:
        """Return the Pub/Sub topic ids this feed publishes to, in table order, without repeats."""
        out: list[str] = []
        for table in self.tables:
            for family, _ in self.families(table):
                topic = self.topic(table, family)
                if topic not in out:
                    out.append(topic)
        return out

    def _topic_tables(self) -> list[tuple[str, str]]:
        """(topic, table) pairs for resolved messages; table is "" on a shared topic."""
        if self.options.topic_name:
            return [(self.options.topic_name, "")]
        return [(self.topic(t, f), t) for t in self.tables for f, _ in self.families(t)]

    # ---- messages
    def row_messages(
        self,
        t: Table,
        op: str,
        pk: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        hlc: HLC,
        ts_ns: int,
    ) -> Iterator[SimMessage]:
        """Yield the messages of one row change (``op``: c, u, d): one, or one per changed column family."""
        key_row = after if after is not None else before
        assert key_row is not None
        for family, cols in self.families(t.name):
            if op == "u" and before is not None and all(before[c] == after[c] for c in cols):  # type: ignore[index]
                continue  # CockroachDB only sees the column families whose KV changed.
            fam_after = None if after is None else {c: after[c] for c in cols}
            fam_before = None if before is None else {c: before[c] for c in cols}
            value, key_text = self.encode_value(t, op, key_row, fam_before, fam_after, cols, hlc, ts_ns)
            topic = self.topic(t.name, family)
            data, ordering_key = self.wrap(key_text, value, topic)
            attrs = {"TABLE_NAME": t.name} if self.options.with_table_name_attribute else {}
            yield SimMessage(topic, t.name, data, attrs, ordering_key, "row", op, key_text, str(hlc), pk)

    def encode_value(
        self,
        t: Table,
        op: str,
        key_row: Mapping[str, Any],
        before: dict | None,
        after: dict | None,
        cols: tuple[str, ...],
        hlc: HLC,
        ts_ns: int,
    ) -> tuple[Any, str]:
        """Return the message's value (JSON-ready) and its key's JSON text, in the changefeed's envelope."""
        o = self.options
        pk_list = [key_row[c] for c in t.pk]
        if o.envelope == "wrapped":
            value: dict[str, Any] = {"after": after}
            if o.diff:
                value["before"] = before
            if o.key_in_value:
                value["key"] = pk_list
            if o.updated:
                value["updated"] = str(hlc)
            if o.mvcc_timestamp:
                value["mvcc_timestamp"] = str(hlc)
            return value, crdb_json(pk_list)
        if o.envelope == "bare":
            # A bare delete still names every column: key columns keep their value, the rest null.
            value = dict(after) if after is not None else {c: (key_row[c] if c in t.pk else None) for c in cols}
            meta: dict[str, Any] = {}
            if o.updated:
                meta["updated"] = str(hlc)
            if o.mvcc_timestamp:
                meta["mvcc_timestamp"] = str(hlc)
            if o.key_in_value:
                meta["key"] = pk_list
            if meta:
                value["__crdb__"] = meta
            return value, crdb_json(pk_list)
        return self._enriched(t, op, key_row, before, after, cols, hlc, ts_ns)

    def _enriched(
        self,
        t: Table,
        op: str,
        key_row: Mapping[str, Any],
        before: dict | None,
        after: dict | None,
        cols: tuple[str, ...],
        hlc: HLC,
        ts_ns: int,
    ) -> tuple[Any, str]:
        o = self.options
        key_obj = {c: key_row[c] for c in t.pk}
        payload: dict[str, Any] = {
            "after": after,
            "op": op,
            "ts_ns": ts_ns,
        }
        if o.diff:
            payload["before"] = before
        if o.key_in_value:
            payload["key"] = key_obj
        if "source" in o.enriched_properties:
            source: dict[str, Any] = dict(self._source_static, primary_keys=list(t.pk), table_name=t.name)
            if o.updated:
                source["ts_hlc"] = str(hlc)
                source["ts_ns"] = hlc.wall
            if o.mvcc_timestamp:
                source["mvcc_timestamp"] = str(hlc)
            payload["source"] = source
        if "schema" not in o.enriched_properties:
            return payload, crdb_json(key_obj)
        col_defs = [t.column(c) for c in cols]
        key_cols = [t.column(c) for c in t.pk]
        fields: list[dict[str, Any]] = []
        if o.diff:
            fields.append(struct_schema("before", f"{t.name}.before.value", col_defs, True))
        fields.append(struct_schema("after", f"{t.name}.after.value", col_defs, False))
        if "source" in o.enriched_properties:
            fields.append(source_schema())
        if o.key_in_value:
            fields.append(struct_schema("key", f"{t.name}.key", key_cols, False))
        fields += [
            {"field": "ts_ns", "optional": False, "type": "int64"},
            {"field": "op", "optional": False, "type": "string"},
        ]
        schema = {"fields": fields, "name": "cockroachdb.envelope", "optional": False, "type": "struct"}
        key = {"payload": key_obj, "schema": struct_schema(None, f"{t.name}.key", key_cols, False)}
        return {"payload": payload, "schema": schema}, crdb_json(key)

    def wrap(self, key_text: str, value: Any, topic: str) -> tuple[bytes, str]:
        """Build the Pub/Sub body and ordering key; both sink generations are built here."""
        if self.options.legacy_wrapper:
            # Go's json.Marshal of json.RawMessage fields: compacted, HTML characters escaped.
            key_c = crdb_json(json.loads(key_text, parse_float=Decimal), compact=True, escape_html=True)
            body = (
                '{"key":'
                + key_c
                + ',"value":'
                + crdb_json(value, compact=True, escape_html=True)
                + ',"topic":'
                + json_string(topic, True)
                + "}"
            )
            return body.encode("utf-8"), key_text
        body = '{"Key":' + key_text + ',"Value":' + crdb_json(value) + ',"Topic":' + json_string(topic, True) + "}"
        return body.encode("utf-8"), ""

    def resolved(self, hlc: HLC) -> Iterator[SimMessage]:
        """Yield a resolved message at ``hlc`` to every topic (``table`` "" on a shared topic)."""
        if self.options.envelope == "bare":
            data = (f'{{"__crdb__":{{"resolved":"{hlc}"}}}}').encode()
        else:
            data = (f'{{"resolved":"{hlc}"}}').encode()
        for topic, table in self._topic_tables():
            yield SimMessage(topic, table, data, {}, "", "resolved", "", "", str(hlc), "")
