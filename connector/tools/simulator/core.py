"""The simulator: a deterministic sequence of row changes, their messages, and the ground truth."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .clock import HLC, Clock
from .cockroach import CockroachEncoder
from .debezium import PRODUCERS, DebeziumEncoder, delivered_value
from .encoding import crdb_json
from .messages import OPS, SimMessage, validate
from .publish import PublishReport, delivery_plan, ensure_topics, ordering_enabled, publish_plan
from .tables import DATABASE, SCHEMA, TABLES
from .values import Generator, LiveRows


class ChangefeedSimulator:
    """Deterministic CockroachDB changefeed traffic for the movr tables, with its ground truth.

    Options mirror ``CREATE CHANGEFEED ... WITH``: ``envelope`` ("wrapped", "bare", "enriched"),
    ``enriched_properties`` (subset of {"source", "schema"}, enriched only), ``diff`` (not with
    bare), ``updated``, ``mvcc_timestamp``, ``key_in_value``, ``column_families`` (vehicles is
    split into families ``primary`` and ``details``: topics ``vehicles.primary`` and
    ``vehicles.details``), ``full_table_name`` (topic ``movr.public.<table>``), ``topic_name``
    (one topic for everything), ``resolved_every`` (a resolved message to every topic after every
    N row changes; 0 = never), ``legacy_wrapper`` (pre-v25.2 sink layout, ordering key = key),
    ``with_table_name_attribute`` (Pub/Sub attribute ``TABLE_NAME``), ``tables`` (subset of
    ``TABLES``), ``mix`` ((insert, update, delete) weights or a dict of them) and ``seed``.

    ``producer`` lays the same changes out as another producer publishes them: ``cockroachdb``
    (the default, with the options above), ``debezium-postgres``, ``debezium-mysql`` or ``ticdc``
    (:mod:`crdb_pubsub.tools.simulator.debezium`; the CockroachDB options stay at their defaults,
    ``resolved_every`` sends TiCDC's watermarks, ``snapshot_rows`` starts a Debezium feed with a
    snapshot of the rows those first changes leave).

    Invalid options raise ``ValueError`` naming the option. In the enriched envelope ``updated``
    and ``mvcc_timestamp`` only show inside ``source`` (as CockroachDB does), so without the
    ``source`` property they add nothing.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        envelope: str = "wrapped",
        enriched_properties: Sequence[str] | str | None = None,
        diff: bool = False,
        updated: bool = False,
        mvcc_timestamp: bool = False,
        key_in_value: bool = False,
        column_families: bool = False,
        full_table_name: bool = False,
        topic_name: str | None = None,
        resolved_every: int = 0,
        legacy_wrapper: bool = False,
        with_table_name_attribute: bool = False,
        tables: Sequence[str] | None = None,
        mix: Sequence[float] | Mapping[str, float] = (0.6, 0.3, 0.1),
        producer: str = "cockroachdb",
        snapshot_rows: int = 0,
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed: expected an int, got {seed!r}")
        _check_producer(producer, snapshot_rows, resolved_every, locals())
        self.seed = seed
        self.producer = producer
        self._snapshot_rows = snapshot_rows
        self.options = validate(
            envelope=envelope,
            enriched_properties=enriched_properties,
            diff=diff,
            updated=updated,
            mvcc_timestamp=mvcc_timestamp,
            key_in_value=key_in_value,
            column_families=column_families,
            full_table_name=full_table_name,
            topic_name=topic_name,
            resolved_every=resolved_every,
            legacy_wrapper=legacy_wrapper,
            with_table_name_attribute=with_table_name_attribute,
            tables=tables,
            mix=mix,
        )
        # Separate streams: the row changes must not depend on envelope options or delivery.
        self._gen = Generator(random.Random(f"crdb-sim:data:{seed}"))
        self._op_rng = random.Random(f"crdb-sim:ops:{seed}")
        self._clock = Clock(random.Random(f"crdb-sim:clock:{seed}"), 1_745_000_000_000_000_000)
        self._meta_rng = random.Random(f"crdb-sim:meta:{seed}")
        meta = random.Random(f"crdb-sim:source:{seed}")
        self._source_static = {
            "changefeed_sink": "pubsub",
            "cluster_id": str(uuid.UUID(int=meta.getrandbits(128), version=4)),
            "cluster_name": "",
            "database_name": DATABASE,
            "db_version": "v25.4.0",
            "job_id": str(1066452286961614849 + meta.randrange(10**12)),
            "node_id": "1",
            "node_name": "localhost",
            "origin": "cockroachdb",
            "schema_name": SCHEMA,
            "source_node_locality": "",
        }
        self._rows: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in self.options.tables}
        self._live: dict[str, LiveRows] = {t: LiveRows() for t in self.options.tables}
        self._stats = {
            t: {"inserts": 0, "updates": 0, "deletes": 0, "row_messages": 0, "resolved": 0} for t in self.options.tables
        }
        self._changes_since_resolved = 0
        self._debezium = DebeziumEncoder(producer) if producer != "cockroachdb" else None
        self._crdb = CockroachEncoder(self.options, self._source_static, {t: TABLES[t] for t in self.options.tables})

    # ---- topics
    def _topic(self, table: str) -> str:
        if self._debezium is not None:
            return self._debezium.topic(table)
        return self._crdb.topic(table, None)

    def topics(self) -> list[str]:
        """Return the Pub/Sub topic ids this feed publishes to, in table order, without repeats."""
        if self._debezium is not None:
            return [self._debezium.topic(t) for t in self.options.tables]
        return self._crdb.topics()

    # ---- generation
    def events(self, n_rows: int) -> Iterator[SimMessage]:
        """Yield the messages of ``n_rows`` more row changes, in commit order.

        Each change gets a strictly greater HLC than the previous one and yields one message
        (one per changed column family with ``column_families``). After every
        ``resolved_every`` changes, a resolved message carrying the last commit HLC goes to every
        topic. Generation continues where the previous call stopped; the ground truth follows
        the generator lazily (it covers the changes yielded so far).
        """
        if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 0:
            raise ValueError(f"n_rows: expected an int >= 0, got {n_rows!r}")
        if self._snapshot_rows and n_rows:
            yield from self._snapshot()
        for _ in range(n_rows):
            yield from self._one_change()
            self._changes_since_resolved += 1
            every = self.options.resolved_every
            if every and self._changes_since_resolved >= every:
                self._changes_since_resolved = 0
                yield from self._resolved(self._clock.now)

    def _snapshot(self) -> Iterator[SimMessage]:
        """Make the first ``snapshot_rows`` changes unstreamed, then read the rows they leave as a snapshot."""
        assert self._debezium is not None
        n, self._snapshot_rows = self._snapshot_rows, 0
        for _ in range(n):
            for _message in self._one_change(streamed=False):
                pass
        hlc = self._clock.tick()
        rows = {t: {pk: self._rows[t][pk] for pk in sorted(self._rows[t])} for t in self.options.tables}
        by_table = {TABLES[t]: r for t, r in rows.items()}
        for msg in self._debezium.snapshot(by_table, hlc, hlc.wall + 50_000_000):
            self._stats[msg.table]["row_messages"] += 1
            yield msg

    def _pick_op(self, table: str) -> str:
        w_ins, w_upd, w_del = self.options.mix
        if not len(self._live[table]):
            return "insert"
        return self._op_rng.choices(OPS, weights=(w_ins, w_upd, w_del))[0]

    def _one_change(self, streamed: bool = True) -> Iterator[SimMessage]:
        table = self._op_rng.choice(self.options.tables)
        op = self._pick_op(table)
        rows, live = self._rows[table], self._live[table]
        before: dict[str, Any] | None = None
        after: dict[str, Any] | None
        if op == "insert":
            after = self._new_row(table)
            pk = self._pk_text(table, after)
            if pk in rows:  # a 122-bit UUID collision: treat as an update to keep the truth exact.
                op, before = "update", rows[pk]
            else:
                live.add(pk)
        else:
            pk = live.choice(self._op_rng)
            before = rows[pk]
            after = self._updated_row(table, before) if op == "update" else None
            if after is None:
                live.remove(pk)
        if after is None:
            del rows[pk]
        else:
            rows[pk] = after
        stat = {"insert": "inserts", "update": "updates", "delete": "deletes"}[op]
        self._stats[table][stat] += 1
        hlc = self._clock.tick()
        if streamed:
            yield from self._row_messages(table, op, pk, before, after, hlc)

    def _new_row(self, table: str) -> dict[str, Any]:
        if table == "users":
            return self._gen.user()
        if table == "vehicles":
            return self._gen.vehicle()
        return self._gen.ride(self._some_key("users", "id"), self._some_key("vehicles", "id"))

    def _some_key(self, table: str, column: str) -> str | None:
        live = self._live.get(table)
        if not live:
            return None
        return self._rows[table][live.choice(self._gen.rng)][column]

    def _updated_row(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        return {"users": self._gen.user_update, "vehicles": self._gen.vehicle_update, "rides": self._gen.ride_update}[
            table
        ](row)

    @staticmethod
    def _pk_text(table: str, row: Mapping[str, Any]) -> str:
        return crdb_json([row[c] for c in TABLES[table].pk])

    # ---- encoding
    def _row_messages(
        self, table: str, op: str, pk: str, before: dict[str, Any] | None, after: dict[str, Any] | None, hlc: HLC
    ) -> Iterator[SimMessage]:
        ts_ns = hlc.wall + self._meta_rng.randint(5_000_000, 400_000_000)
        letter = {"insert": "c", "update": "u", "delete": "d"}[op]
        if self._debezium is not None:
            messages: Iterator[SimMessage] = iter(
                [self._debezium.change(TABLES[table], letter, before, after, hlc, pk, ts_ns)]
            )
        else:
            messages = self._crdb.row_messages(TABLES[table], letter, pk, before, after, hlc, ts_ns)
        for msg in messages:
            self._stats[table]["row_messages"] += 1
            yield msg

    def _resolved(self, hlc: HLC) -> Iterator[SimMessage]:
        if self._debezium is not None:  # TiCDC's watermarks (_check_producer allows no other)
            messages = [
                self._debezium.watermark(self._debezium.topic(t), t, hlc, hlc.wall + 10_000_000)
                for t in self.options.tables
            ]
        else:
            messages = list(self._crdb.resolved(hlc))
        for msg in messages:
            for t in [msg.table] if msg.table else self.options.tables:
                self._stats[t]["resolved"] += 1
            yield msg

    # ---- results
    def ground_truth(self) -> dict[str, dict[str, dict[str, Any]]]:
        r"""Return the final state of every table after the changes generated so far.

        ``{table: {pk_json_text: {column: value}}}`` where ``pk_json_text`` is the primary-key
        array in CockroachDB's formatting (``SimMessage.pk``, e.g. ``["seattle", "6f0c..."]``),
        and values are exact: ``Decimal`` for DECIMAL, ``int`` for INT8, ``bool`` for BOOL,
        ``str`` for STRING/UUID/TIMESTAMP/TIMESTAMPTZ/BYTES (as sent, e.g. ``"\x0a0b"``),
        ``float`` for finite FLOATs and the sent string ("NaN", "Infinity", "-Infinity") for the
        others, parsed JSON for JSONB and arrays (JSON numbers: ``int`` or ``Decimal``), ``None``
        for NULL (JSON null in a JSONB column too). With column families the row is whole. Deleted
        rows are absent. The result is a deep copy.

        For another ``producer`` the values are those it delivers
        (:func:`~crdb_pubsub.tools.simulator.debezium.delivered_value`: a TIMESTAMP is a BIGINT of
        microseconds; in MySQL and TiDB a non-finite FLOAT is NULL).
        """
        if self._debezium is None:
            return _deep_copy(self._rows)
        return {
            table: {
                pk: {c.name: delivered_value(self.producer, c, row[c.name]) for c in TABLES[table].columns}
                for pk, row in rows.items()
            }
            for table, rows in _deep_copy(self._rows).items()
        }

    def stats(self) -> dict[str, dict[str, int]]:
        """Return the counts per table.

        ``inserts``, ``updates``, ``deletes`` (row changes), ``row_messages`` and ``resolved``
        (resolved messages sent to the topics the table publishes to).
        """
        return {t: dict(s) for t, s in self._stats.items()}

    # ---- publishing
    def publish(
        self,
        publisher: Any,
        project: str,
        n_rows: int,
        *,
        rate: float | None = None,
        create_topics: bool = True,
        shuffle_window: int = 0,
        duplicate_fraction: float = 0.0,
        on_progress: Callable[[int, int], None] | None = None,
        timeout: float = 120.0,
        rpc_timeout: float | None = None,
    ) -> PublishReport:
        """Publish the messages of ``events(n_rows)`` with a google-cloud-pubsub ``PublisherClient``.

        Creates missing topics first (``create_topics``). Delivery order is the commit order,
        shuffled inside consecutive windows of ``shuffle_window`` messages when > 1; a
        ``duplicate_fraction`` of the messages is published a second time, a few messages later,
        with the same bytes (a new message id), like CockroachDB re-emitting after a restart. At
        most ``rate`` messages per second when given. ``on_progress(published, total)`` is called
        after each batch of submissions and at the end. Waits for every publish future (up to
        ``timeout`` seconds overall) and raises ``RuntimeError`` naming the failures, if any.
        Legacy ordering keys need a publisher created with message ordering enabled.
        ``rpc_timeout`` bounds each publish, its retries included (default: the client's, 600 s).
        """
        if rate is not None and (not isinstance(rate, (int, float)) or not rate > 0):
            raise ValueError(f"rate: expected a number > 0 or None, got {rate!r}")
        if isinstance(shuffle_window, bool) or not isinstance(shuffle_window, int) or shuffle_window < 0:
            raise ValueError(f"shuffle_window: expected an int >= 0, got {shuffle_window!r}")
        if not isinstance(duplicate_fraction, (int, float)) or not 0.0 <= duplicate_fraction <= 1.0:
            raise ValueError(f"duplicate_fraction: expected 0.0..1.0, got {duplicate_fraction!r}")
        if self.uses_ordering_keys and not ordering_enabled(publisher):
            what = "legacy_wrapper" if self.options.legacy_wrapper else "producer"
            raise ValueError(
                f"{what}: the publisher must enable message ordering (make_publisher(host, ordering=True))"
            )
        if create_topics:
            ensure_topics(publisher, project, self.topics())
        messages = list(self.events(n_rows))
        plan, n_dups = delivery_plan(
            messages,
            shuffle_window,
            duplicate_fraction,
            random.Random(f"crdb-sim:delivery:{self.seed}:{self._stats_total()}"),
        )
        report = publish_plan(publisher, project, plan, rate, on_progress, timeout, rpc_timeout)
        report.row_messages = sum(1 for m in messages if m.kind == "row")
        report.resolved_messages = len(messages) - report.row_messages
        report.duplicates = n_dups
        report.stats = self.stats()
        return report

    @property
    def uses_ordering_keys(self) -> bool:
        """Whether the messages carry ordering keys (the legacy sink's, Debezium Server's)."""
        return self.options.legacy_wrapper or self.producer in ("debezium-postgres", "debezium-mysql")

    def _stats_total(self) -> int:
        return sum(s["row_messages"] + s["resolved"] for s in self._stats.values())


def _deep_copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _deep_copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_deep_copy(x) for x in v]
    return v  # str, int, Decimal, float, bool and None are immutable


_CRDB_ONLY = {
    "envelope": "wrapped",
    "enriched_properties": None,
    "diff": False,
    "updated": False,
    "mvcc_timestamp": False,
    "key_in_value": False,
    "column_families": False,
    "full_table_name": False,
    "topic_name": None,
    "legacy_wrapper": False,
    "with_table_name_attribute": False,
}


def _check_producer(producer: str, snapshot_rows: Any, resolved_every: Any, given: Mapping[str, Any]) -> None:
    """Check ``producer`` and its options: the CockroachDB options are CockroachDB's alone."""
    if producer not in ("cockroachdb", *PRODUCERS):
        raise ValueError(f"producer: expected one of {('cockroachdb', *PRODUCERS)}, got {producer!r}")
    if isinstance(snapshot_rows, bool) or not isinstance(snapshot_rows, int) or snapshot_rows < 0:
        raise ValueError(f"snapshot_rows: expected an int >= 0, got {snapshot_rows!r}")
    if producer == "cockroachdb":
        if snapshot_rows:
            raise ValueError("snapshot_rows: a Debezium feed's snapshot; CockroachDB's initial scan is not simulated")
        return
    for name, default in _CRDB_ONLY.items():
        if given[name] not in (default, "", ()):
            raise ValueError(f"{name}: a CockroachDB changefeed option, not for producer={producer!r}")
    if resolved_every and producer != "ticdc":
        raise ValueError(
            f"resolved_every: {producer} sends no resolved timestamps (TiCDC's watermarks: producer='ticdc')"
        )
    if snapshot_rows and producer == "ticdc":
        raise ValueError("snapshot_rows: TiCDC's changefeeds start at a timestamp, without a snapshot")
