"""``envelope=csv``: CockroachDB's ``format=csv`` bodies, one CSV record typed by ``rowSchema``."""

from __future__ import annotations

import csv
import io

from ..common import Bad, Context, Row
from ..registry import Family


def _body(body: bytes, env: str, ctx: Context) -> list[Row] | None:
    if env != "csv":
        return None
    assert ctx.csv_convert is not None
    try:
        records = list(csv.reader(io.StringIO(body.decode("utf-8"), newline=""), strict=True))
    except csv.Error as exc:
        raise Bad(f"invalid CSV ({exc})") from None
    if len(records) != 1:
        raise Bad(f"a CSV message must hold one record, got {len(records)}")
    from ...typed import TypedError

    row = Row("row", "csv")
    try:
        row.after = ctx.csv_convert(records[0])
    except TypedError as exc:
        raise Bad(f"after: {exc}") from None
    row.op = "r"
    return [row]


FAMILY = Family(order=1, names=("csv",), body=_body)
