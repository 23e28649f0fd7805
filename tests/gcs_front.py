"""An HTTP front for the suite's Cloud Storage server (fake-gcs-server) that gives delta-rs the two
XML API calls the server lacks, so Delta tables can live on ``gs://`` in tests.

delta-rs (object_store) reaches any endpoint through a service-account file with ``gcs_base_url``
and ``disable_oauth`` (``GOOGLE_SERVICE_ACCOUNT`` names it; :func:`delta_account` writes one), but it
speaks Cloud Storage's XML API, and the test server (fake-gcs-server 1.54) lacks two pieces of it:

* an object PUT (``PUT /bucket/key``, with ``x-goog-if-generation-match: 0`` for a Delta commit)
  is answered ``400 invalid uploadType`` (fake-gcs-server issue 331, open);
* an XML listing ignores ``start-after``, so delta-rs sees old commits as new ones and a MERGE
  fails with ``Invalid table version``.

:class:`XmlFront` stands between them and translates exactly those two (the PUT into a JSON
multipart upload with ``ifGenerationMatch``, which the server enforces; the listing filtered past
``start-after``); every other request goes through unchanged, and a request it can't translate
(an XML multipart upload, a copy) is answered 501 naming it and recorded in ``refused``.
Real Cloud Storage needs none of this. Used by ``tests/test_dataproc.py``.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import subprocess
import sys
import threading
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path


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
    """This file run as ``python gcs_front.py UPSTREAM REFUSED``: the front's process and endpoint."""
    proc = subprocess.Popen(
        [sys.executable, __file__, upstream, str(refused)],
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


@contextlib.contextmanager
def delta_account(upstream: str, folder: Path) -> Iterator[Path]:
    """An :class:`XmlFront` before ``upstream`` for as long as the block runs, and the service-account
    file that points delta-rs at it (give it as ``GOOGLE_SERVICE_ACCOUNT``, or as the
    ``google_service_account`` storage option). Raises after the block if the front refused a call."""
    refused = folder / "refused.txt"
    proc, endpoint = start_xml_front(upstream, refused)
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
        yield account
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if refused.exists():
        raise AssertionError(f"XmlFront refused: {refused.read_text()}")


if __name__ == "__main__":
    XmlFront(sys.argv[1], Path(sys.argv[2])).serve_until_stdin_closes()
