"""examples/dataproc/streaming_job.py run exactly as Dataproc runs it: ``spark-submit`` with the built wheel
on ``--py-files``, against the emulator, bounded with ``--available-now``; the source's ``stateDir`` and the
Delta tables on ``gs://`` (the suite's Cloud Storage test server), in both receiver modes.

Delta on ``gs://``: delta-rs (object_store) reaches any endpoint through a service-account file
with ``gcs_base_url`` and ``disable_oauth`` (``GOOGLE_SERVICE_ACCOUNT`` names it), but it speaks
Cloud Storage's XML API, and the test server (fake-gcs-server 1.54) lacks two pieces of it:

* an object PUT (``PUT /bucket/key``, with ``x-goog-if-generation-match: 0`` for a Delta commit)
  is answered ``400 invalid uploadType`` (fake-gcs-server issue 331, open);
* an XML listing ignores ``start-after``, so delta-rs sees old commits as new ones and a MERGE
  fails with ``Invalid table version``.

:class:`XmlFront` stands between them and translates exactly those two (the PUT into a JSON
multipart upload with ``ifGenerationMatch``, which the server enforces; the listing filtered past
``start-after``); every other request goes through unchanged, and a request it can't translate
(an XML multipart upload, a copy) is answered 501 naming it.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import publish_simulated
from crdb_pubsub.apply import compare_to_ground_truth
from crdb_pubsub.tools.simulator import primary_keys, spark_schemas

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "dataproc" / "streaming_job.py"
PROJECT = "test-project"


def _spark_submit() -> str:
    """The spark-submit the pyspark package ships (next to the venv's python, else in SPARK_HOME)."""
    candidate = Path(sys.executable).with_name("spark-submit")
    if candidate.exists():
        return str(candidate)
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


class XmlFront:
    """An HTTP front for the test server that gives delta-rs the two XML API calls it lacks (see the
    module docstring). ``endpoint`` is where delta-rs goes; what it refuses is appended to ``refused``.

    It runs in a process of its own (:func:`start_xml_front`): delta-rs calls such as
    ``DeltaTable.is_deltatable`` hold the GIL while they wait for the server, so a front on a thread
    of the calling process never answers them."""

    def __init__(self, upstream: str, refused: Path) -> None:
        up = urllib.parse.urlsplit(upstream)
        self.upstream = (up.hostname, up.port)
        self.refused = refused
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "host"}
                if self.command == "PUT" and not query and "x-goog-copy-source" not in headers:
                    return self.reply(*front.put_object(url.path, body or b"", headers))
                if self.command in ("PUT", "POST"):
                    with open(front.refused, "a", encoding="utf-8") as fh:
                        fh.write(f"{self.command} {self.path}\n")
                    return self.reply(501, {}, f"XmlFront: no translation for {self.command} {self.path}".encode())
                after = query.pop("start-after", [None])[0] if "list-type" in query else None
                path = (
                    url.path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
                    if after is not None
                    else self.path
                )
                status, out_headers, data = front.forward(self.command, path, body, headers)
                if after is not None and status == 200:
                    data = _drop_keys_up_to(data, after)
                self.reply(status, out_headers, data)

            def reply(self, status: int, headers: dict, data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_one

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def forward(self, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def put_object(self, path: str, data: bytes, headers: dict) -> tuple[int, dict, bytes]:
        """``PUT /bucket/key`` as a JSON multipart upload (the server enforces ``ifGenerationMatch``
        there, not on ``uploadType=media``); answers with the headers object_store reads."""
        bucket, _, key = path.lstrip("/").partition("/")
        bucket, key = urllib.parse.unquote(bucket), urllib.parse.unquote(key)
        query = {"uploadType": "multipart"}
        if "x-goog-if-generation-match" in headers:
            query["ifGenerationMatch"] = headers["x-goog-if-generation-match"]
        boundary = uuid.uuid4().hex
        body = (
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps({'name': key})}"
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        status, _, out = self.forward(
            "POST",
            f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?" + urllib.parse.urlencode(query),
            body,
            {"content-type": f"multipart/related; boundary={boundary}"},
        )
        if status != 200:
            return status, {}, b""
        obj = json.loads(out)
        return 200, {"ETag": f'"{obj["md5Hash"]}"', "x-goog-generation": str(obj["generation"])}, b""

    def serve_until_stdin_closes(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="xml-front", daemon=True).start()
        print(self.endpoint, flush=True)
        sys.stdin.read()  # the test closes it, or dies
        self.server.shutdown()


def start_xml_front(upstream: str, refused: Path) -> tuple[subprocess.Popen, str]:
    """This file run as ``python test_dataproc.py xml-front UPSTREAM REFUSED``: the front's process and endpoint."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "xml-front", upstream, str(refused)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent,
    )
    endpoint = proc.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        proc.kill()
        raise RuntimeError(f"the XML front did not start (exit code {proc.wait()})")
    return proc, endpoint


def _drop_keys_up_to(listing: bytes, after: str) -> bytes:
    """An XML ``ListBucketResult`` without the keys <= ``after`` (``start-after`` is exclusive)."""
    root = ET.fromstring(listing)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if ns:
        ET.register_namespace("", ns[1:-1])
    kept = 0
    for item in root.findall(f"{ns}Contents"):
        if item.findtext(f"{ns}Key", "") <= after:
            root.remove(item)
        else:
            kept += 1
    count = root.find(f"{ns}KeyCount")
    if count is not None:
        count.text = str(kept + len(root.findall(f"{ns}CommonPrefixes")))
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


@pytest.fixture(scope="module")
def delta_gcs(gcs_server, tmp_path_factory):
    """delta-rs pointed at the test server through :class:`XmlFront`: ``(storage_options, env)``,
    the same settings as ``storage_options`` (this process) and as environment (the job's)."""
    folder = tmp_path_factory.mktemp("delta-gcs")
    refused = folder / "refused.txt"
    proc, endpoint = start_xml_front(gcs_server.endpoint, refused)
    account = folder / "service-account.json"
    account.write_text(
        json.dumps(
            {
                "gcs_base_url": endpoint,
                "disable_oauth": True,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            }
        )
    )
    try:
        yield {"google_service_account": str(account)}, {"GOOGLE_SERVICE_ACCOUNT": str(account)}
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert not refused.exists(), refused.read_text()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (whl,) = out.glob("crdb_pubsub-*.whl")
    return whl


def test_the_wheel_carries_every_module(wheel):
    """Dataproc imports the package from the wheel alone. The suite's editable install finds every
    folder whatever setup.cfg lists, so a sub-package the wheel leaves out shows only here."""
    import zipfile

    folders = {
        "connector/autoregister": "pyspark_crdb_pubsub",
        "connector": "crdb_pubsub",
        "emulator": "crdb_pubsub/emulator",
    }
    want = set()
    for path in (ROOT / "connector").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        src = next(f for f in folders if rel.startswith(f + "/"))
        want.add(folders[src] + rel[len(src) :])
    want |= {"crdb_pubsub/emulator/" + p.name for p in (ROOT / "emulator").glob("*.py")}
    with zipfile.ZipFile(wheel) as whl:
        have = {n for n in whl.namelist() if n.endswith(".py")}
    assert sorted(want - have) == []


class _Watch(threading.Thread):
    """Lists the stateDir's ``v3/`` every 0.2 s while the job runs: every key ever seen."""

    def __init__(self, url: str) -> None:
        super().__init__(name="state-dir-watch", daemon=True)
        from crdb_pubsub.source.storage import open_storage

        self.storage, self.seen, self.done = open_storage(url), set(), threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.seen.update(self.storage.list("v3/"))


@pytest.mark.parametrize("receiver", ["driver", "executors"])
def test_streaming_job_via_spark_submit_with_the_wheel(
    gcs_server, delta_gcs, emulator_host, wheel, gcs_state_url: str, tmp_path: Path, receiver: str
):
    """The job as Dataproc runs it, with either receiver: the source's stateDir and the Delta tables
    on gs:// (the checkpoint stays local: Spark reaches gs:// through the Cloud Storage connector's
    jar, which this machine can't fetch)."""
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    storage_options, delta_env = delta_gcs
    sim = ChangefeedSimulator(seed=5, updated=True, diff=True, resolved_every=50)
    stem = f"dp-{tmp_path.name[-12:]}".replace("_", "-")
    subs, report = publish_simulated(emulator_host, PROJECT, sim, stem, 600, shuffle_window=20, duplicate_fraction=0.03)

    # One bucket, one prefix per query, as the guide recommends: the ledger and the tables side by side.
    source_state, tables = f"{gcs_state_url}/source-state", f"{gcs_state_url}/tables"
    checkpoint = tmp_path / "checkpoint"
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        STORAGE_EMULATOR_HOST=gcs_server.endpoint,
        **delta_env,
    )
    cmd = [
        _spark_submit(),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--py-files",
        str(wheel),
        str(JOB),
        "--subscriptions",
        ",".join(subs),
        "--emulator-host",
        emulator_host,
        "--checkpoint",
        str(checkpoint),
        "--state-dir",
        tables,
        "--simulator-schemas",
        "--available-now",
        "--option",
        "maxMessagesPerTrigger=400",
        "--option",
        "ackDeadlineSeconds=30",
        "--option",
        f"stateDir={source_state}",
        "--option",
        f"receiver={receiver}",
    ]
    if receiver == "executors":
        cmd += ["--option", "numPartitions=2"]
    watch = _Watch(source_state)
    watch.start()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    finally:
        watch.done.set()
        watch.join()
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith('{"event"')]
    assert res.returncode == 0, res.stderr[-3000:]
    start, done = events[0], events[-1]
    assert start["event"] == "start" and done["event"] == "done", events
    # The job imported the package from the wheel on --py-files, as on Dataproc.
    assert wheel.name in start["module"], start["module"]
    batches = [e for e in events if e["event"] == "batch"]
    assert len(batches) >= 2 and done["batches"] == len(batches)
    assert done["messages"] >= report.published - report.duplicates and done["malformed"] == 0

    # The Delta tables are on gs:// and hold the simulator's ground truth.
    problems = compare_to_ground_truth(
        tables, sim.ground_truth(), spark_schemas(), primary_keys(), storage_options=storage_options
    )
    assert problems == []
    assert {t: c["rows"] for t, c in done["tables"].items()} == {t: len(r) for t, r in sim.ground_truth().items()}
    from crdb_pubsub.source.storage import open_storage

    objects = open_storage(tables).list("")
    assert {k.split("/")[0] for k in objects if "/_delta_log/" in k} == set(done["tables"]), objects[:20]

    # The source's ledger went through the bucket: what a batch records before Spark learns its
    # offset (driver: the batch; executors: the plan and the tasks' slices), and what stays after.
    after = set(open_storage(source_state).list("v3/"))
    seen = watch.seen | after
    recorded = ("v3/batches/",) if receiver == "driver" else ("v3/plans/", "v3/slices/")
    for prefix in recorded:
        assert any(k.startswith(prefix) for k in seen), (prefix, sorted(seen)[:20])
    assert {"v3/META.json", "v3/LOCK"} <= after and any(k.startswith("v3/acked/") for k in after), sorted(after)


def test_streaming_job_bad_arguments_exit_2():
    res = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--subscriptions",
            "x",
            "--checkpoint",
            "c",
            "--state-dir",
            "s",
            "--option",
            "noequals",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr


@pytest.mark.parametrize(
    "state_dir", ["gs://b/cdc/checkpoint", "gs://b/cdc/checkpoint/state/", "gs://b/cdc", "gs://b/cdc/tables/source"]
)
def test_streaming_job_refuses_a_source_state_dir_that_overlaps(state_dir):
    """The source's stateDir needs a prefix of its own: not the checkpoint's, nor the Delta tables'."""
    res = subprocess.run(
        [
            sys.executable,
            str(JOB),
            "--subscriptions",
            "x",
            "--checkpoint",
            "gs://b/cdc/checkpoint",
            "--state-dir",
            "gs://b/cdc/tables",
            "--option",
            f"stateDir={state_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "prefix of its own" in res.stderr, res.stderr


if __name__ == "__main__" and sys.argv[1:2] == ["xml-front"]:
    XmlFront(sys.argv[2], Path(sys.argv[3])).serve_until_stdin_closes()
