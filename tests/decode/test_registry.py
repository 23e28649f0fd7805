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
    assert ENVELOPES == ("auto", *registry.NAMES)


def test_a_new_envelope_is_one_module(tmp_path, monkeypatch):
    (tmp_path / "shouting.py").write_text(textwrap.dedent('''
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
    '''))
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
