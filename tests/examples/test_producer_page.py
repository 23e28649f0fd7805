"""docs/producer.md says what the producers send: each body it shows is an entry of the
conformance corpus (tests/data/conformance) and decodes to rows, and its changefeed URIs use only
the parameters CockroachDB's Pub/Sub sink reads. Its gcloud commands are checked with the Dataproc
guide's (tests/examples/test_dataproc_guide.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from crdb_pubsub import decode_messages

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "producer.md"
CORPUS = ROOT / "tests" / "data" / "conformance"
# pkg/ccl/changefeedccl/sink_pubsub_v2.go (cockroachdb/cockroach): the parameters it consumes.
SINK_PARAMETERS = {"region", "topic_name", "with_table_name_attribute", "AUTH", "CREDENTIALS", "ASSUME_ROLE"}


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def _corpus() -> list[object]:
    out = []
    for path in CORPUS.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(json.loads(line)["body"]))
            except ValueError:  # documentation placeholders: not JSON
                pass
    return out


def test_every_body_shown_is_a_corpus_entry_and_decodes():
    bodies = _blocks("json")
    assert len(bodies) >= 3
    corpus = _corpus()
    for body in bodies:
        assert json.loads(body) in corpus, body[:200]
        rows = decode_messages([body.strip().encode()]).to_pylist()
        assert rows and all(r["kind"] != "malformed" for r in rows), rows


def test_the_changefeed_uris_use_only_what_the_sink_reads():
    uris = re.findall(r"'(gcpubsub://[^']+)'", "\n".join(_blocks("sql")))
    assert uris
    for uri in uris:
        params = {k for k, _ in parse_qsl(urlsplit(uri).query)}
        assert params <= SINK_PARAMETERS, params - SINK_PARAMETERS
        assert "region" in params  # required unless the changefeed is WITH unordered
