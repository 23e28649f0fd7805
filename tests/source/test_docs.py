"""The README's option and metric tables are generated from the code, and say what the code does."""

from __future__ import annotations

import inspect
from pathlib import Path

from spark_calls import Logs, SparkCalls

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.source.datasource import CrdbPubSubDataSource
from crdb_pubsub.source.metrics import METRICS
from crdb_pubsub.source.options import SourceOptions, option_table, parse_options
from crdb_pubsub.tools import readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_tables_are_the_generated_ones():
    text = README.read_text()
    assert readme.rewrite(text) == text, "README's generated tables are stale: run python -m crdb_pubsub.tools.readme README.md"


def test_every_option_is_documented_and_the_datasource_docstring_holds_the_table():
    for name, field in SourceOptions.model_fields.items():
        assert field.description, f"option {name} has no description"
    assert option_table() in CrdbPubSubDataSource.__doc__


def test_decoder_options_are_decode_messages_arguments():
    opts = parse_options({"subscription": "projects/p/subscriptions/orders"})
    params = inspect.signature(decode_messages).parameters
    assert set(opts.decoder_kwargs()) <= set(params)


def test_the_progress_report_holds_exactly_the_documented_metrics(fake, make_reader):
    sub = "projects/p/subscriptions/metrics"
    fake.create_subscription(sub, ack_deadline=10)
    fake.publish(sub, [b'{"after": {"id": 1}}'] * 5)
    calls = SparkCalls(make_reader(sub), Logs(), "4.3")
    calls.start()
    for _ in range(3):
        calls.trigger()
    report = calls.reader.reportLatestOffset()
    assert set(report) <= set(METRICS), f"undocumented metrics: {set(report) - set(METRICS)}"
    always = {name for name, m in METRICS.items() if m.always}
    assert always <= set(report), f"documented but never reported: {always - set(report)}"
