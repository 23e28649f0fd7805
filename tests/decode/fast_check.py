"""What the fast-path tests share: decode a batch with the families' fast paths and without them
(every body through the general path), and require the same record batch.

The fast paths are switched off by patching the registry (each family's ``fast`` hook set to None),
so the shipped code carries no switch of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from crdb_pubsub import decode_messages
from crdb_pubsub.decode import decoder
from crdb_pubsub.decode.envelopes import registry

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "conformance"  # tests/data/conformance/README.md
sys.path.insert(0, str(ROOT / "examples"))
import bench_decode  # noqa: E402

CONFORMANCE = [
    json.loads(line)["body"].encode()
    for name in ("crdb_examples.jsonl", "debezium_examples.jsonl")
    for line in (CORPUS / name).read_text().splitlines()
]
FAMILIES = bench_decode.ENVELOPES
TYPED = bench_decode.TYPED_SCHEMA


@contextlib.contextmanager
def general_path_only() -> Iterator[None]:
    """Every family without its fast path, so every body takes the general path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "FAMILIES", tuple(dataclasses.replace(f, fast=None) for f in registry.FAMILIES))
        yield


def both(bodies: list[bytes], **kw: Any) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(with the fast paths, general path only) of the same call."""
    fast = decode_messages(bodies, **kw)
    with general_path_only():
        general = decode_messages(bodies, **kw)
    return fast, general


def _nan_free(value: Any) -> Any:
    """Python values with NaN made comparable (Arrow's equals, like ==, never matches NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    return value


def assert_same(bodies: list[bytes], **kw: Any) -> pa.RecordBatch:
    """Decode ``bodies`` both ways and require equal batches; returns the fast paths' one."""
    fast, general = both(bodies, **kw)
    assert fast.schema.equals(general.schema)
    for name in fast.schema.names:
        f, g = fast.column(name), general.column(name)
        if not f.equals(g):  # only NaN may compare unequal
            fl, gl = _nan_free(f.to_pylist()), _nan_free(g.to_pylist())
            assert fl == gl, (name, [(i, a, b) for i, (a, b) in enumerate(zip(fl, gl)) if a != b][:3])
            assert f.is_valid().equals(g.is_valid())
    return fast


def fast_count(bodies: list[bytes], envelope: str = "auto") -> int:
    """How many of ``bodies`` the fast paths take."""
    return sum(len(idx) for idx, _ in decoder._fast_parts(bodies, envelope))


def wrap(key: str, value: str, topic: str = "t") -> bytes:
    """A value in CockroachDB's Pub/Sub v2 wrapper."""
    return ('{"Key":' + key + ',"Value":' + value + ',"Topic":"' + topic + '"}').encode()
