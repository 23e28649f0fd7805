"""Typed rows in bulk (``row_schema``; ``typed.struct_column``): the fast paths' row images become
struct columns column by column, exactly as the per-value converter of the general path makes them;
every value the bulk conversion is unsure of sends its message to the general path.
"""

from __future__ import annotations

import random

import pytest

from crdb_pubsub import MalformedMessageError, decode_messages

from .fast_check import assert_same, bench_decode, general_path_only, wrap


@pytest.mark.parametrize("family", ["wrapped", "bare", "enriched", "debezium"])
def test_generated_bodies_typed(family: str) -> None:
    bodies = bench_decode.make_bodies(300, seed=5, envelope=family)
    schema = "city STRING, creation_time TIMESTAMP, ext STRING, id STRING, price DECIMAL(10,2), type STRING"
    batch = assert_same(bodies, row_schema=schema)
    assert batch.column("kind").to_pylist().count("row") == 300


def test_typed_values_the_bulk_conversion_must_leave_to_the_general_path() -> None:
    schema = "i BIGINT, s SMALLINT, d DECIMAL(6,2), f DOUBLE, r FLOAT, b BOOLEAN, t STRING, ts TIMESTAMP, a ARRAY<INT>, n INT NOT NULL"
    rows = [
        '{"i": 9223372036854775807, "s": 7, "d": 26.30, "f": 1.5, "r": 0.1, "b": true, "t": "x", "ts": "2025-05-09T21:20:29.203923Z", "a": [1, null], "n": 1}',
        '{"i": -9223372036854775808, "s": -32768, "d": -0.00, "f": "NaN", "r": "Infinity", "b": false, "t": 12.50, "ts": null, "a": null, "n": 0}',
        '{"i": 9223372036854775808, "n": 1}',  # beyond BIGINT
        '{"i": 1.0, "n": 1}',
        '{"i": "1", "n": 1}',
        '{"s": 32768, "n": 1}',
        '{"d": 1234.567, "n": 1}',  # too much scale
        '{"d": 12345.6, "n": 1}',  # too many integer digits
        '{"d": 26.300, "n": 1}',  # trailing zero beyond the scale: fits
        '{"d": 1e2, "n": 1}',
        '{"d": "1", "n": 1}',
        '{"f": 1e400, "n": 1}',
        '{"f": "nope", "n": 1}',
        '{"b": 1, "n": 1}',
        '{"t": "tab\\there \\"q\\" \\u00e9", "n": 1}',
        '{"t": {"nested": [1, 2]}, "n": 1}',
        '{"t": "a", "t": "b", "n": 1}',  # the last one wins, as with the converter's dict
        '{"ts": "2025-05-09 21:20:29+02:00", "n": 1}',
        '{"ts": "yesterday", "n": 1}',
        '{"a": [1, "x"], "n": 1}',
        '{"n": null}',
        "{}",
        '{"extra": 1, "n": 2}',
    ]
    bodies = [wrap("[1]", '{"after": ' + r + ', "before": ' + r + ', "updated": "1.0000000000"}') for r in rows]
    bodies.append(wrap("[1]", '{"after": null, "before": {"n": 1}}'))
    bodies.append(wrap("[1]", '{"after": null, "before": null}'))
    batch = assert_same(bodies, row_schema=schema)
    kinds = batch.column("kind").to_pylist()
    assert kinds[0] == kinds[1] == "row" and kinds[2] == "malformed"
    after = batch.column("after").to_pylist()
    assert (
        str(after[8]["d"]) == "26.30" and after[14]["t"] == 'tab\there "q" é' and after[15]["t"] == '{"nested": [1, 2]}'
    )
    assert after[16]["t"] == "b"
    assert_same(bodies, row_schema=schema, mode="DROPMALFORMED")
    with pytest.raises(MalformedMessageError) as exc:
        decode_messages(bodies, row_schema=schema, mode="FAILFAST")
    with general_path_only(), pytest.raises(MalformedMessageError) as exc_general:
        decode_messages(bodies, row_schema=schema, mode="FAILFAST")
    assert str(exc.value) == str(exc_general.value)


def test_typed_random_values_match() -> None:
    rng = random.Random(4)
    schema = "a BIGINT, b DECIMAL(12,2), c DOUBLE, d STRING, e INT, f BOOLEAN"
    bodies = []
    for _ in range(400):
        vals = {
            "a": rng.choice([str(rng.randrange(-(2**64), 2**64)), "0", "-0", "null", "1e3", '"7"']),
            "b": rng.choice(
                [
                    f"{rng.randrange(-(10**12), 10**12) / 100:.2f}",
                    "0.5",
                    "-0.001",
                    "10000000000.00",
                    f"{rng.random():.5f}",
                    "null",
                    "1E+2",
                ]
            ),
            "c": rng.choice([repr(rng.uniform(-1e300, 1e300)), "0.1", "-0.0", '"-Infinity"', "5e-324", "1e309"]),
            "d": rng.choice(['"plain"', '"esc\\\\aped"', "12.50", "true", "null", '"\\ud83d\\ude00"']),
            "e": rng.choice([str(rng.randrange(-(2**32), 2**32)), "null"]),
            "f": rng.choice(["true", "false", "null", '"true"']),
        }
        keys = list(vals)
        rng.shuffle(keys)
        row = "{" + ", ".join(f'"{k}": {vals[k]}' for k in keys if rng.random() > 0.1) + "}"
        bodies.append(wrap("[1]", '{"after": ' + row + "}"))
    batch = assert_same(bodies, row_schema=schema)
    assert 0 < batch.column("kind").to_pylist().count("malformed") < 400


@pytest.mark.parametrize("notnull", [False, True])
def test_timestamps_dates_bytes_arrays_and_special_floats_in_bulk(notnull: bool) -> None:
    """The column types converted in bulk since issue 25, each beside the values left to the
    per-value converter; every message comes out as the general path makes it."""
    nn = " NOT NULL" if notnull else ""
    schema = f"ts TIMESTAMP{nn}, d DATE, b BINARY, f DOUBLE, a ARRAY<STRING>, s STRING"
    values = {
        "ts": [
            '"2019-01-02T03:04:05"',
            '"2025-05-09T21:20:29.203923Z"',
            '"2019-01-02 03:04:05.5z"',
            '"0001-01-01T00:00:00"',
            '"9999-12-31T23:59:59.999999"',
            '"2020-02-29T00:00:00"',
            '"2025-05-09T21:20:29+02:00"',
            '"2025-05-09T21:20:29.1234560"',
            '"2025-05-09T21:20:29.1234567"',
            '"0000-01-01T00:00:00"',
            '"2019-02-29T00:00:00"',
            '"2019-01-02T03:04:05\\u005a"',
            '"yesterday"',
            "1",
            "null",
        ],
        "d": ['"2019-01-02"', '"2020-02-29"', '"2019-02-29"', '"0000-01-01"', '"2019-W01-1"', "17000", '"x"', "null"],
        "b": ['"\\\\x0a1B"', '"\\\\x"', '"\\\\x0"', '"\\\\xzz"', '"0a"', '"\\\\x0a 1b"', "12", "null"],
        "f": ['"NaN"', '"Infinity"', '"-Infinity"', '"nan"', "1e400", "-0.0", "5e-324", "26.30", '"1"', "null"],
        "a": ['["x", null, "\\u00e9\\"q"]', "[]", "null", '[1, "x"]', '["x", ["y"]]', '"x"'],
        "s": ['"plain"', '"tab\\there \\ud83d\\ude00"', '"\\u0000"', "12.50", '{"k": [1, 2]}', "null"],
    }
    rng = random.Random(25)
    bodies = []
    for i in range(300):
        cols = {k: v[i % len(v)] if i < 60 else rng.choice(v) for k, v in values.items()}
        row = "{" + ", ".join(f'"{k}": {cols[k]}' for k in cols if rng.random() > 0.05) + "}"
        bodies.append(wrap("[1]", '{"after": ' + row + ', "updated": "1.0000000000"}'))
    batch = assert_same(bodies, row_schema=schema)
    kinds = batch.column("kind").to_pylist()
    assert 0 < kinds.count("malformed") < len(bodies) and "row" in kinds


def test_a_column_every_row_lacks() -> None:
    bodies = [wrap("[1]", '{"after": {"a": 1}}'), wrap("[2]", '{"after": null, "before": {"a": 2}}')]
    assert_same(bodies, row_schema="a BIGINT, missing TIMESTAMP, gone BINARY")
    assert_same(bodies, row_schema="a BIGINT, missing TIMESTAMP NOT NULL")
