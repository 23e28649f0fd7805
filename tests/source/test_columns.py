"""The ``columns`` option: the output columns the user names, and only those, built and shipped.

Spark does not prune a Python source's columns, so projecting all 19 into rows costs the JVM even
when a query reads five (issue 32). Fast tier: the option's validation, the pruned schema, the
decoder building only those columns, and a replay from the stateDir with them (the fake Pub/Sub,
Spark's calls played in-process). The end-to-end run on Spark is ``test_columns_on_spark``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.decode.schema import COLUMN_NAMES, arrow_schema, spark_schema
from crdb_pubsub.source.options import OptionError, parse_options

pytestmark = pytest.mark.virtual_time  # the fake's waits and the source's on the virtual clock (tests/virtual_time.py)

SUB = "projects/p/subscriptions/sub-x"
WANTED = "kind,table_name,key,after,mvcc_timestamp,error"


def _parse(**options: str):
    return parse_options({"subscription": SUB, "emulatorHost": "127.0.0.1:1", **options})


# ----------------------------------------------------------------------------- the option


def test_columns_are_kept_in_the_order_given():
    opts = _parse(columns="after, key ,KIND,error")
    assert opts.output_columns == ("after", "key", "kind", "error")


def test_without_the_option_every_column_in_the_documented_order():
    assert _parse().output_columns == COLUMN_NAMES


@pytest.mark.parametrize(
    "value, says",
    [
        ("kind,tabel_name,error", "unknown column 'tabel_name' (did you mean 'table_name'?)"),
        ("kind,payload,error", "unknown column 'payload'"),
        ("", "names no column"),
        (" , ", "names no column"),
        ("kind,,error", "empty entry"),
        ("kind,key,Kind,error", "names 'kind' twice"),
    ],
)
def test_bad_columns_fail_naming_the_option_and_the_accepted_columns(value, says):
    with pytest.raises(OptionError) as err:
        _parse(columns=value)
    text = str(err.value)
    assert f"option 'columns'={value!r} is not accepted" in text
    assert says in text
    # The accepted values: every column name, in the documented order.
    assert ", ".join(COLUMN_NAMES) in text


def test_permissive_needs_the_error_column():
    with pytest.raises(OptionError) as err:
        _parse(columns="kind,table_name,key,after,mvcc_timestamp")
    text = str(err.value)
    assert "option 'columns'" in text and "mode=PERMISSIVE" in text and "error" in text
    assert "DROPMALFORMED" in text and "FAILFAST" in text


@pytest.mark.parametrize("mode", ["DROPMALFORMED", "FAILFAST"])
def test_the_modes_that_make_no_malformed_rows_need_no_error_column(mode):
    assert _parse(columns="kind,key,after", mode=mode).output_columns == ("kind", "key", "after")


def test_dead_letters_with_dropmalformed_need_no_error_column():
    opts = _parse(columns="key,after", mode="DROPMALFORMED", deadLetterTopic="projects/p/topics/dead")
    assert opts.output_columns == ("key", "after")


def test_include_raw_needs_the_data_column():
    with pytest.raises(OptionError, match=r"option 'columns' leaves out data, which includeRaw=true fills"):
        _parse(columns="kind,key,error", includeRaw="true")
    assert _parse(columns="data,error", includeRaw="true").output_columns == ("data", "error")


def test_what_the_source_reads_itself_is_decoded_too_then_left_out():
    dead = _parse(columns="key,after", mode="DROPMALFORMED", deadLetterTopic="projects/p/topics/dead")
    assert dead.decode_columns == ("key", "after", "kind", "data", "message_id", "error")
    assert _parse(columns="key,error", includeResolved="false").decode_columns == ("key", "error", "kind")
    assert _parse(columns="kind,error").decode_columns == ("kind", "error")


# ----------------------------------------------------------------------------- the schema


def test_the_schemas_are_pruned_in_the_order_given():
    names = ("after", "kind", "commit_time")
    assert [f.name for f in spark_schema(None, names).fields] == list(names)
    full = arrow_schema(None)
    assert arrow_schema(None, names) == pa.schema([full.field(n) for n in names])


def test_the_data_source_reports_the_pruned_schema():
    from crdb_pubsub.source.datasource import CrdbPubSubDataSource

    ds = CrdbPubSubDataSource({"subscription": SUB, "emulatorHost": "127.0.0.1:1", "columns": WANTED})
    assert ds.schema().fieldNames() == WANTED.split(",")
    typed = CrdbPubSubDataSource(
        {"subscription": SUB, "emulatorHost": "127.0.0.1:1", "columns": "after,error", "rowSchema": "id BIGINT"}
    )
    assert typed.schema()["after"].dataType.simpleString() == "struct<id:bigint>"


# ----------------------------------------------------------------------------- the decoder


def _bodies() -> list[bytes]:
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    sim = ChangefeedSimulator(seed=3, updated=True, resolved_every=20)
    bodies = [m.data for m in sim.events(200)]
    bodies[7] = b"{not json"
    # A Debezium tombstone takes its key from the ordering key: the key column needs columns the
    # output may not have.
    bodies[11] = b""
    return bodies


def _full_and_pruned(names, **kw):
    bodies = _bodies()
    meta = dict(
        message_ids=[str(i) for i in range(len(bodies))],
        publish_times=list(range(len(bodies))),
        attributes=[{"TABLE_NAME": "renamed"} if i % 3 == 0 else None for i in range(len(bodies))],
        ordering_keys=[f"ok{i}" for i in range(len(bodies))],
    )
    return decode_messages(bodies, **meta, **kw), decode_messages(bodies, **meta, columns=names, **kw)


@pytest.mark.parametrize(
    "names",
    [
        ("kind", "table_name", "key", "after", "mvcc_timestamp", "error"),
        ("key", "data", "message_id"),  # data of the malformed row; key of the tombstone
        ("publish_time", "attributes", "ordering_key", "commit_time"),
        tuple(reversed(COLUMN_NAMES)),
    ],
)
@pytest.mark.parametrize("include_raw", [False, True])
def test_the_decoder_builds_the_named_columns_with_the_same_values(names, include_raw):
    full, pruned = _full_and_pruned(names, include_raw=include_raw)
    assert pruned.schema == arrow_schema(None, names)
    assert pruned.num_rows == full.num_rows
    for name in names:
        assert pruned.column(name).equals(full.column(name)), name


def test_the_decoder_names_the_accepted_columns():
    with pytest.raises(ValueError, match=r"unknown column 'nope'.*message_id, publish_time"):
        decode_messages([b"{}"], columns=["kind", "nope"])
    with pytest.raises(ValueError, match="names 'kind' twice"):
        decode_messages([b"{}"], columns=["kind", "kind"])
    with pytest.raises(ValueError, match="names no column"):
        decode_messages([b"{}"], columns=[])


# ----------------------------------------------------------------------------- the source


@pytest.mark.parametrize("mode", ["driver", "executors"])
def test_a_replayed_batch_has_the_same_pruned_content(fake, make_reader, tmp_path, mode):
    """A batch the sink failed is re-decoded from the stateDir by a new reader: the same columns, the
    same rows."""
    from spark_calls import Logs, SparkCalls

    sub = "projects/p/subscriptions/columns"
    fake.create_subscription(sub, ack_deadline=10)
    fake.publish(sub, _bodies())
    options = dict(stateDir=tmp_path / "state", receiver=mode, columns="key,error,after,kind")
    if mode == "executors":
        options["numPartitions"] = 2

    class Fails(RuntimeError):
        pass

    first_rows: list = []

    def failing(batch_id, batches):
        first_rows.extend(_sorted_rows(batches))
        raise Fails

    logs = Logs()
    first = SparkCalls(make_reader(sub, **options), logs)
    first.start()
    with pytest.raises(Fails):
        first.trigger(failing)
    first.reader.stop()
    # Published after the batch was planned: a batch pulled afresh would hold them, its replay can't.
    fake.publish(
        sub, [b'{"Key":[%d],"Value":{"after":{"id":%d}},"Topic":"t"}' % (i, i) for i in range(10**6, 10**6 + 20)]
    )

    second = SparkCalls(make_reader(sub, **options), logs)
    second.start()
    second.trigger()
    (batch_id, replayed), *_ = second.batches
    assert batch_id == max(logs.offsets)
    assert {tuple(b.schema.names) for b in replayed} == {("key", "error", "after", "kind")}
    assert first_rows and _sorted_rows(replayed) == first_rows
    assert any(dict(r)["error"] for r in first_rows)  # the malformed body's reason came through


def _sorted_rows(batches) -> list:
    rows = [tuple(sorted(r.items())) for b in batches for r in b.to_pylist()]
    return sorted(rows, key=repr)


def test_dead_letters_keep_their_body_id_and_reason_while_spark_gets_the_named_columns(fake, make_reader, monkeypatch):
    from crdb_pubsub.source import dead_letter
    from spark_calls import Logs, SparkCalls

    published: list[dict] = []
    monkeypatch.setattr(dead_letter, "publish_malformed", lambda batch, options: published.extend(batch.to_pylist()))
    sub = "projects/p/subscriptions/columns-dead"
    fake.create_subscription(sub, ack_deadline=10)
    bodies = _bodies()
    ids = fake.publish(sub, bodies)
    options = dict(
        columns="after,key", mode="DROPMALFORMED", deadLetterTopic="projects/p/topics/dead", includeResolved="false"
    )
    calls = SparkCalls(make_reader(sub, **options), Logs())
    calls.start()
    calls.trigger()
    (_, batches), *_ = calls.batches
    assert {tuple(b.schema.names) for b in batches} == {("after", "key")}
    malformed = [r for r in published if r["kind"] == "malformed"]
    assert [(r["data"], r["message_id"]) for r in malformed] == [(bodies[7], ids[7])] and malformed[0]["error"]
    expected = decode_messages(bodies, mode="DROPMALFORMED").to_pylist()
    rows = [r for r in expected if r["kind"] not in ("resolved", "watermark")]
    assert sum(b.num_rows for b in batches) == len(rows)
