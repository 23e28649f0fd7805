"""Compare the state tables with a ground truth (the simulator's, in tests, the demo and examples)."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["compare_to_ground_truth"]


def _ts(text: str) -> _dt.datetime:
    ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=_dt.UTC)


def _same(dtype: Any, got: Any, want: Any) -> bool:
    from pyspark.sql.types import BinaryType, DecimalType, DoubleType, FloatType, StringType, TimestampType

    if want is None or got is None:
        return want is None and got is None
    if isinstance(dtype, DecimalType):
        # Equal value *and* the same digits: 26.30 must not come back as 26.3.
        quantum = decimal.Decimal(1).scaleb(-dtype.scale)
        return (
            isinstance(got, decimal.Decimal)
            and got == want
            and str(got) == str(decimal.Decimal(want).quantize(quantum))
        )
    if isinstance(dtype, TimestampType):
        return got == _ts(want)
    if isinstance(dtype, (DoubleType, FloatType)):
        if isinstance(want, str):
            w = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[want]
            return math.isnan(got) if math.isnan(w) else got == w
        return got == want
    if isinstance(dtype, BinaryType):
        return bytes(got) == bytes.fromhex(want[2:])
    if isinstance(dtype, StringType) and not isinstance(want, str):
        return json.loads(got, parse_float=decimal.Decimal) == want  # JSONB kept as its text
    return got == want and type(got) is type(want)


def compare_to_ground_truth(
    state_dir: str,
    truth: Mapping[str, Mapping[str, Mapping[str, Any]]],
    schemas: Mapping[str, Any],
    primary_keys: Mapping[str, Sequence[str]],
    limit: int = 10,
    storage_options: Mapping[str, str] | None = None,
) -> list[str]:
    """List the differences between the live state and ``truth``; an empty list means equal.

    ``truth`` is ``{table: {pk_json: {column: value}}}``, as ``ChangefeedSimulator.ground_truth()``
    gives it.

    Keys are compared as primary-key value lists (an enriched feed's key objects are put in
    ``primary_keys`` order). Every column is compared exactly for its type: DECIMAL digits,
    timestamps to the microsecond, JSONB as parsed JSON.
    """
    from .delta import read_state
    from .schemas import KEY, as_struct

    problems: list[str] = []
    for table, rows in truth.items():
        struct = as_struct(schemas[table])
        try:
            state = read_state(state_dir, table, with_meta=True, storage_options=storage_options).to_pylist()
        except LookupError:
            if rows:
                problems.append(f"{table}: no state, expected {len(rows)} rows")
            continue
        got: dict[str, dict[str, Any]] = {}
        for r in state:
            k = json.loads(r[KEY])
            k = [k[c] for c in primary_keys[table]] if isinstance(k, dict) else k
            got[json.dumps(k)] = r
        want = {json.dumps(json.loads(k)): v for k, v in rows.items()}
        if set(got) != set(want):
            missing, extra = set(want) - set(got), set(got) - set(want)
            problems.append(
                f"{table}: {len(got)} rows in state, {len(want)} expected; missing {len(missing)} "
                f"(e.g. {sorted(missing)[:2]}), extra {len(extra)} (e.g. {sorted(extra)[:2]})"
            )
        for key in sorted(set(got) & set(want)):
            for f in struct.fields:
                if not _same(f.dataType, got[key].get(f.name), want[key].get(f.name)):
                    problems.append(
                        f"{table} {key} {f.name}: state {got[key].get(f.name)!r} != truth {want[key].get(f.name)!r}"
                    )
                    if len(problems) >= limit:
                        return problems
    return problems
