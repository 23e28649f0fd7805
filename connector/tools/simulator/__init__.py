"""A deterministic CockroachDB changefeed simulator that publishes to Google Cloud Pub/Sub.

It generates movr-like traffic (``users``, ``vehicles``, ``rides``) and lays every message out
byte for byte as CockroachDB's Pub/Sub sink does:

* row messages: ``{"Key":<key json>,"Value":<value json>,"Topic":"<topic>"}`` built by hand (no
  spaces in the wrapper) around CockroachDB's own JSON encoding (``", "`` / ``": "`` separators,
  sorted object keys, raw UTF-8, exact DECIMAL and INT8 digits);
* resolved messages to every topic, unwrapped and compact: ``{"resolved":"<hlc>"}`` or, with the
  bare envelope, ``{"__crdb__":{"resolved":"<hlc>"}}``;
* optionally the legacy (pre-v25.2) sink: compact lowercase ``{"key":..,"value":..,"topic":..}``
  with the key JSON as ordering key.

The simulator also keeps the ground truth (the final state of every table), so tests can compare
what a consumer rebuilt from the stream with what was really written.

    sim = ChangefeedSimulator(seed=7, envelope="wrapped", diff=True, resolved_every=50)
    for msg in sim.events(1000):
        ...
    truth = sim.ground_truth()

Everything is a pure function of ``seed`` and the options: the data, the HLC timestamps, the
delivery shuffle and the choice of duplicates. The sequence of row changes (and therefore the
ground truth) depends only on ``seed``, ``tables`` and ``mix``, not on envelope options.
"""

from .clock import HLC
from .command import build_arg_parser, checked_simulator, main, simulator_from_args
from .core import ChangefeedSimulator
from .encoding import crdb_json
from .messages import SimMessage
from .publish import PublishReport, make_publisher, make_subscriber
from .tables import DATABASE, SCHEMA, TABLES, Column, Table, primary_keys, spark_schemas
from .values import INT8_MAX

__all__ = [
    "DATABASE",
    "HLC",
    "INT8_MAX",
    "SCHEMA",
    "TABLES",
    "ChangefeedSimulator",
    "Column",
    "PublishReport",
    "SimMessage",
    "Table",
    "build_arg_parser",
    "checked_simulator",
    "crdb_json",
    "main",
    "make_publisher",
    "make_subscriber",
    "primary_keys",
    "simulator_from_args",
    "spark_schemas",
]
