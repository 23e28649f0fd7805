"""Which Debezium or TiCDC change of a key is the latest: each producer's own log position, exactly.

A Debezium event carries no HLC. What orders two changes of one key is where the producer read
them in its database's log, and every producer says so differently:

* **PostgreSQL** (``connector: "postgresql"``): ``source.sequence``, a JSON array text
  ``["<last commit LSN>", "<LSN>"]`` (Debezium 1.5+, DBZ-2911), compared as a pair of integers;
  without it the LSN alone (``source.lsn``, as ``[null, lsn]``). ``txId`` is no order: a
  transaction id is given at its first write, not at its commit.
* **MySQL** (``"mysql"``, and ``"mariadb"``): the binlog coordinates ``file`` (its numeric
  suffix), ``pos`` and ``row`` (the row inside a rows event), compared as integers.
* **TiCDC** (``"TiCDC"``): ``commit_ts``, the transaction's TSO.

``ts_ms`` is a millisecond clock, not an order (two changes in one millisecond, clocks that step
back): a Debezium event whose producer gives no position the apply knows is refused, with the
reason, never ordered by it.

At an equal position the op decides: for Debezium (PostgreSQL, MySQL) a snapshot read loses to an
insert, which loses to an update, which loses to a delete (a truncate ranks as a delete); TiCDC
splits an update of a unique key into a delete and an insert with one ``commit_ts``, the insert
being the row's state after the transaction, so there an insert beats a delete.

An order is a fixed-width text that sorts (byte-wise, as SQL compares strings) as the position
and op do, so that the MERGE's one ``>`` carries the whole rule, as it does for CockroachDB's HLC.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import msgspec

__all__ = ["PRODUCERS", "Position", "Refused", "debezium_position"]

PRODUCERS = ("debezium-postgres", "debezium-mysql", "ticdc")

_DEBEZIUM_RANK = {"r": 0, "c": 1, "u": 2, "d": 3, "t": 3}
_TICDC_RANK = {"r": 0, "d": 1, "c": 2, "u": 3, "t": 1}
_BINLOG_FILE = re.compile(r".*?([0-9]+)\Z")
_U64 = 2**64
_SOURCE = msgspec.json.Decoder(dict[str, Any])


class Refused(ValueError):
    """A change the apply cannot place (no position, no key): malformed, with this reason."""


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a producer read a change: ``order`` sorts as it does, ``text`` says it (``_crdb_hlc``)."""

    producer: str
    order: str
    text: str


def _uint(source: dict[str, Any], name: str, what: str) -> int:
    value = source.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
        raise Refused(f"{what}: `source.{name}` must be an unsigned integer, got {value!r}")
    return value


def _postgres(source: dict[str, Any], rank: int) -> Position:
    sequence = source.get("sequence")
    commit = 0
    lsn = source.get("lsn")
    if sequence is not None:
        try:
            pair = msgspec.json.decode(sequence) if isinstance(sequence, str) else None
        except msgspec.DecodeError:
            pair = None
        if not isinstance(pair, list) or len(pair) != 2 or not all(p is None or isinstance(p, str) for p in pair):
            raise Refused(
                f'PostgreSQL: `source.sequence` must be a JSON array text ["<lsn>", "<lsn>"], got {sequence!r}'
            )
        try:
            commit = int(pair[0]) if pair[0] is not None else 0
            if lsn is None and pair[1] is not None:
                lsn = int(pair[1])
        except ValueError:
            raise Refused(f"PostgreSQL: `source.sequence` holds a non-integer LSN: {sequence!r}") from None
        if not 0 <= commit < _U64:
            raise Refused(f"PostgreSQL: `source.sequence` LSN out of range: {sequence!r}")
    if lsn is None:
        raise Refused(
            "PostgreSQL: no `source.lsn` nor `source.sequence`: nothing orders this change (ts_ms is a clock, not an order)"
        )
    lsn = _uint({"lsn": lsn}, "lsn", "PostgreSQL")
    return Position("debezium-postgres", "%020d%020d%d" % (commit, lsn, rank), f"lsn {commit}/{lsn}")


def _binlog(source: dict[str, Any], rank: int, connector: str) -> Position:
    file = source.get("file")
    m = _BINLOG_FILE.match(file) if isinstance(file, str) else None
    if m is None:
        raise Refused(
            f"{connector}: `source.file` {file!r} is not a binlog file name (base.NNNNNN); "
            "without binlog coordinates nothing orders this change (ts_ms is a clock, not an order)"
        )
    index = int(m.group(1))
    pos = _uint(source, "pos", connector)
    row = _uint(source, "row", connector)
    if index >= 10**10 or row >= 10**10:
        raise Refused(f"{connector}: binlog coordinates out of range: {file}:{pos}:{row}")
    return Position("debezium-mysql", "%010d%020d%010d%d" % (index, pos, row, rank), f"{file}:{pos}:{row}")


def _ticdc(source: dict[str, Any], rank: int) -> Position:
    ts = _uint(source, "commit_ts", "TiCDC")
    return Position("ticdc", "%020d%d" % (ts, rank), f"commit_ts {ts}")


def debezium_position(source_text: str | None, op: str) -> Position:
    """Return the position of a Debezium (or TiCDC) change event, from its ``source`` block's JSON text.

    Raises :class:`Refused` naming what is missing: no ``source``, a connector whose position the
    apply does not know, or a position field that is absent or not an integer.
    """
    if not source_text:
        raise Refused("a Debezium change without `source`: no position orders it (ts_ms is a clock, not an order)")
    try:
        source = _SOURCE.decode(source_text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refused(f"`source` is not a JSON object ({exc})") from None
    connector = source.get("connector")
    if connector == "TiCDC" or (connector is None and "commit_ts" in source):
        return _ticdc(source, _TICDC_RANK.get(op, 3))
    rank = _DEBEZIUM_RANK.get(op, 2)
    if connector == "postgresql":
        return _postgres(source, rank)
    if connector in ("mysql", "mariadb"):
        return _binlog(source, rank, connector)
    raise Refused(
        f"Debezium connector {connector!r}: the apply orders changes by the positions of postgresql (lsn), "
        "mysql/mariadb (binlog file, pos, row) and TiCDC (commit_ts); ts_ms is a clock, not an order"
    )
