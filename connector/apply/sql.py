"""The MERGE that applies a reduced batch, in the two dialects that run it.

delta-rs (DataFusion SQL: ``"quoted"`` names) runs it on the driver; Spark SQL (```quoted``` names)
runs it on a cluster catalog table (Delta or Iceberg on Dataproc/Databricks). Both carry the same
rule: a change is applied only when its order key (HLC, then delete > update > insert) is
strictly greater than the one the state holds for that key, so an older or equal change, a
duplicate or a whole re-run batch changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .schemas import BATCH, DELETED, HLC_COL, KEY, META_PREFIX, ORDER, family_order_column

__all__ = ["merge_clauses", "merge_into_sql", "quote_datafusion", "quote_spark", "truncate_clause"]


def quote_datafusion(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_spark(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def merge_clauses(
    columns: Sequence[str], family_columns: Mapping[str, Sequence[str]] | None, quote: Callable[[str], str]
) -> tuple[str, str, dict[str, str] | None, dict[str, str]]:
    """(ON condition, WHEN MATCHED condition, matched SET (None: every column), INSERT values).

    ``columns`` are the source's columns (user and bookkeeping). With ``family_columns`` (a table
    split into column families: family -> the columns its messages of this batch set) each family
    is compared on its own order key, so a family's late older change neither overwrites a newer
    one of the same family nor is lost behind a newer change of another family.
    """
    q = quote
    on = f"t.{q(KEY)} = s.{q(KEY)}"
    inserts = {q(c): f"s.{q(c)}" for c in columns}
    if not family_columns:
        return on, f"s.{q(ORDER)} > t.{q(ORDER)}", None, inserts
    newer_row = f"s.{q(ORDER)} > t.{q(ORDER)}"
    sets: dict[str, str] = {}
    family_newer = []
    for family, cols in family_columns.items():
        oc = q(family_order_column(family))
        # NULL (family absent from the batch) compares as unknown: the ELSE branch keeps the state.
        newer = f"s.{oc} > coalesce(t.{oc}, '')"
        family_newer.append(newer)
        sets[oc] = f"CASE WHEN {newer} THEN s.{oc} ELSE t.{oc} END"
        for c in cols:
            sets[q(c)] = f"CASE WHEN {newer} THEN s.{q(c)} ELSE t.{q(c)} END"
    # The row as a whole: the newest change of any family says whether it is live or a tombstone.
    for c in (ORDER, HLC_COL, DELETED):
        sets[q(c)] = f"CASE WHEN {newer_row} THEN s.{q(c)} ELSE t.{q(c)} END"
    sets[q(BATCH)] = f"s.{q(BATCH)}"
    return on, "(" + " OR ".join(family_newer) + ")", sets, inserts


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def truncate_clause(
    columns: Sequence[str], order: str, position: str, batch_id: int, quote: Callable[[str], str]
) -> tuple[str, dict[str, str]]:
    """(WHEN NOT MATCHED BY SOURCE condition, SET) of a truncate at ``order``: older rows become tombstones.

    A row the batch does not touch whose change is older than the truncate is deleted by it: a
    tombstone with the truncate's order (and no values), so a late change older than the truncate
    loses to it as to a delete.
    """
    q = quote
    sets = {q(c): "NULL" for c in columns if not c.startswith(META_PREFIX)}
    sets.update({
        q(ORDER): _literal(order),
        q(HLC_COL): _literal(position),
        q(DELETED): "true",
        q(BATCH): str(int(batch_id)),
    })  # fmt: skip
    return f"t.{q(ORDER)} < {_literal(order)}", sets


def merge_into_sql(
    target: str,
    source: str,
    columns: Sequence[str],
    family_columns: Mapping[str, Sequence[str]] | None = None,
    truncate: tuple[str, str, int] | None = None,
) -> str:
    """Spark SQL ``MERGE INTO`` of a reduced batch (a view named ``source``) into table ``target``.

    ``target`` is a catalog table name as Spark SQL takes it (``cat.db.users``), used as given;
    ``columns`` are the source's columns. ``truncate`` (order, position, batch id) adds the
    tombstoning of the rows a truncate wiped out (``WHEN NOT MATCHED BY SOURCE``, Spark 3.4+).
    Runs wherever the session's catalog has a table format with ``MERGE INTO`` (Delta Lake,
    Apache Iceberg).
    """
    on, matched, sets, inserts = merge_clauses(columns, family_columns, quote_spark)
    update = "UPDATE SET *" if sets is None else "UPDATE SET " + ", ".join(f"t.{k} = {v}" for k, v in sets.items())
    insert = (
        "INSERT *"
        if not family_columns
        else "INSERT (" + ", ".join(inserts) + ") VALUES (" + ", ".join(inserts.values()) + ")"
    )
    statement = (
        f"MERGE INTO {target} AS t\nUSING {source} AS s\nON {on}\n"
        f"WHEN MATCHED AND {matched} THEN {update}\n"
        f"WHEN NOT MATCHED THEN {insert}"
    )
    if truncate is not None:
        older, wipe = truncate_clause(columns, *truncate, quote_spark)
        statement += f"\nWHEN NOT MATCHED BY SOURCE AND {older} THEN UPDATE SET " + ", ".join(
            f"t.{k} = {v}" for k, v in wipe.items()
        )
    return statement
