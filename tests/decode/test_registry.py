"""The envelope registry: one module per family, and a new envelope is one new module."""

from __future__ import annotations

import textwrap

import pytest

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.decode.envelopes import Context, decode_body, registry
from crdb_pubsub.decode.envelopes.families import __path__ as families_path
from crdb_pubsub.decode.vocabulary import ENVELOPES


def test_every_family_module_declares_one_family_in_a_distinct_order():
    orders = [f.order for f in registry.FAMILIES]
    assert len(set(orders)) == len(orders)
    assert ("auto", *registry.NAMES) == ENVELOPES


def test_a_new_envelope_is_one_module(tmp_path, monkeypatch):
    (tmp_path / "shouting.py").write_text(
        textwrap.dedent("""
        from crdb_pubsub.decode.envelopes.common import Context, Row
        from crdb_pubsub.decode.envelopes.registry import Family

        def _claims(d, keys, env):
            return env in ("auto", "shouting") and keys == {"ROW"}

        def _decode(d, raw, ctx, env):
            row = Row("row", "shouting")
            row.after = d["ROW"]
            row.op = "u"
            return [row]

        FAMILY = Family(order=55, names=("shouting",), claims=_claims, decode=_decode)
    """)
    )
    monkeypatch.setattr("crdb_pubsub.decode.envelopes.families.__path__", [*families_path, str(tmp_path)])
    families = registry._discover()
    assert "shouting" in [n for f in families for n in f.names]
    monkeypatch.setattr(registry, "FAMILIES", families)
    (row,) = decode_body(b'{"ROW": {"id": 1}}', Context("auto"))
    assert (row.envelope, row.op, row.after) == ("shouting", "u", b'{"id": 1}')


def test_a_forced_envelope_that_does_not_fit_names_the_envelope():
    with pytest.raises(Exception, match="envelope=wrapped: the value has no `after` field"):
        decode_body(b'{"before": {"id": 1}}', Context("wrapped"))
    batch = decode_messages([b'{"payload": {}}'], envelope="webhook")
    assert batch.column("kind").to_pylist() == ["malformed"]
    assert "envelope=webhook expects" in batch.column("error").to_pylist()[0]


def test_a_family_brings_its_own_fast_path(monkeypatch):
    """A family's ``fast`` hook runs on whole batches before the general path, under the envelopes
    it names, and takes the bodies it returns rows for; the others go on to the general path."""
    import numpy as np
    import pyarrow as pa

    from crdb_pubsub.decode.columns import const
    from crdb_pubsub.decode.envelopes.registry import BatchFast, Family

    seen: list[list[bytes]] = []

    def run(bodies: list[bytes], envelope: str) -> list:
        seen.append(bodies)
        idx = np.array([i for i, b in enumerate(bodies) if b.startswith(b'{"ROW"')], dtype=np.int64)
        m = len(idx)
        none = pa.nulls(m, pa.string())
        cols = dict.fromkeys(("topic", "table_name", "key", "before", "updated", "mvcc_timestamp"), none)
        cols.update(kind=const("row", m), envelope=const("shouting", m), op=const("u", m),
                    after=pa.array([bodies[i].decode() for i in idx]),
                    commit_time=pa.nulls(m, pa.timestamp("us", tz="UTC")))  # fmt: skip
        return [(idx, cols)]

    fast = BatchFast(envelopes=("auto",), likely=lambda first: 3, run=run)
    monkeypatch.setattr(registry, "FAMILIES", (*registry.FAMILIES, Family(order=55, names=(), fast=fast)))
    bodies = [b'{"ROW": 1}', b'{"resolved":"1.0000000002"}', b'{"ROW": 2}']
    batch = decode_messages(bodies)
    assert seen == [bodies]
    assert batch.column("envelope").to_pylist() == ["shouting", "wrapped", "shouting"]
    assert batch.column("after").to_pylist() == ['{"ROW": 1}', None, '{"ROW": 2}']
    decode_messages(bodies, envelope="wrapped")
    assert len(seen) == 1  # not an envelope it runs under
