"""What Spark's driver-side runner imports: it starts once per query, so every import is start-up.

The runner (``python_streaming_source_runner``) unpickles the reader, opens the subscriptions and
pulls; it never decodes. Neither the decoder nor pandas belong on that path (pyarrow imports pandas
on its first conversion of Python values: 0.3-0.5 s of a query's start). The envelope families
are imported, for the names the ``envelope`` option accepts.
Checked in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

from crdb_pubsub.source.datasource import CrdbPubSubDataSource

from .test_wire import _response

RUNNER_PATH = textwrap.dedent(
    """
    import pickle, sys
    from crdb_pubsub.source import transport
    from crdb_pubsub.source.core.protocol import protocol_for
    from crdb_pubsub.source.driver import DriverMode
    from crdb_pubsub.source.wire import pulled_batch

    reader = pickle.loads(READER)  # as the runner gets it from Spark
    pulled_batch(RESPONSE)
    print(" ".join(m for m in ("pandas", "crdb_pubsub.decode.decoder") if m in sys.modules))
    """
)


def test_the_runner_path_imports_neither_the_decoder_nor_pandas():
    # The response travels as bytes: a raw PullResponse with two messages, attributes on one.
    raw = _response(
        [
            {"ack_id": "a0", "message_id": "0"},
            {"ack_id": "a1", "message_id": "1", "attributes": {"TABLE_NAME": "t"}, "ordering_key": "k"},
        ]
    ).SerializeToString()
    # The reader is built and pickled here, as in Spark's planning process.
    ds = CrdbPubSubDataSource({"subscription": "projects/proj/subscriptions/orders", "emulatorHost": "127.0.0.1:1"})
    reader = pickle.dumps(ds.streamReader(ds.schema()))
    script = (
        "from google.pubsub_v1.types import pubsub\n"
        f"RESPONSE = pubsub.PullResponse.pb().FromString({raw!r})\n"
        f"READER = {reader!r}\n" + RUNNER_PATH
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the runner's path imported {out.stdout.strip()}"
