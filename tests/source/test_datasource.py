"""Errors through Spark: the first line a user reads carries the source's own message.

Spark writes a Python data source's error as its prefix, then the Python traceback, then the
message; before, the useful line was the ~25th of 30 (``[STREAM_FAILED] ... initialOffset:
Traceback (most recent call last):`` first). The source's own errors now come without the
traceback, so the first line ends with what went wrong and what to do.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

SUB = "projects/p/subscriptions/sub-x"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("emulatorHost", "localhost", "option 'emulatorHost'='localhost' is not accepted: expected host:port"),
        ("stateDir", "relative/state", "option 'stateDir'='relative/state' is not accepted: a relative path"),
        ("credentialsJson", "not json SECRET", "option 'credentialsJson': not a JSON object"),
    ],
)
def test_a_bad_option_is_the_first_line_of_the_load_error(spark, option, value, expected):
    reader = spark.readStream.format("crdb_pubsub").option("subscription", SUB).option(option, value)
    with pytest.raises(Exception) as info:
        reader.load()
    first = _first_line(info.value)
    assert expected in first, str(info.value)
    assert "Traceback" not in str(info.value) and "SECRET" not in str(info.value)


def test_unreachable_pubsub_is_the_first_line_of_the_query_exception(spark, tmp_path: Path):
    df = spark.readStream.format("crdb_pubsub").option("subscription", SUB).option("emulatorHost", "127.0.0.1:9").load()
    t0 = time.monotonic()
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
    with pytest.raises(Exception) as info:
        q.awaitTermination(90)
    assert time.monotonic() - t0 < 60
    # What awaitTermination raises: "[STREAM_FAILED] Query [...] terminated with exception:
    # [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform
    # initialOffset: crdb_pubsub.source.pubsub.subscription.ReceiverError: cannot reach Pub/Sub at the
    # emulator at 127.0.0.1:9 to open projects/p/subscriptions/sub-x (gave up after 15 s): ...";
    # query.exception() is the same without the [STREAM_FAILED] part.
    for exc in (info.value, q.exception()):
        first = _first_line(exc)
        assert "ReceiverError: cannot reach Pub/Sub at the emulator at 127.0.0.1:9" in first, str(exc)
        assert "Connection refused" in first and "Traceback" not in str(exc)


def test_outside_a_spark_worker_the_environment_is_left_alone(monkeypatch):
    """A test or a program calling the source itself must not hide the tracebacks of a Spark it
    starts later (the setting would be inherited)."""
    from crdb_pubsub.source.datasource import CrdbPubSubDataSource
    from crdb_pubsub.source.options import OptionError

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)
    with pytest.raises(OptionError):
        CrdbPubSubDataSource({"subscription": SUB, "stateDir": "relative"})
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
