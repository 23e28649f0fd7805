"""``crdb-pubsub``: look at a changefeed's Pub/Sub messages, simulate one, run the emulator.

    crdb-pubsub tail --subscription projects/P/subscriptions/S [--limit 20] [--format table|json]
    crdb-pubsub simulate --emulator-host "$PUBSUB_EMULATOR_HOST" --rows 1000 --updated --diff
    eval "$(crdb-pubsub emulator start)"; crdb-pubsub emulator env; crdb-pubsub emulator stop

Exit codes: 0 success; 1 an environment problem (no Application Default Credentials, permission
denied, the emulator failed to start, ...); 2 a mistake in what the command was given: a bad flag,
a credentials file that does not load, a subscription that does not exist, a host that refuses or
does not answer (one line on stderr naming the flag, never a traceback); 130 interrupted. Every
RPC has a deadline (:mod:`crdb_pubsub.tools.rpc`): an unreachable host is said within seconds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from typing import Any, TextIO

# The emulator's command line is part of this one: one parser flavour, one usage error.
from crdb_pubsub.emulator.__main__ import OneLineErrorParser as _Parser
from crdb_pubsub.emulator.__main__ import UsageError
from crdb_pubsub.emulator.__main__ import positive_integer as _positive_int
from crdb_pubsub.emulator.__main__ import positive_number as _positive_float
from crdb_pubsub.tools.rpc import RPC_SECONDS, Unreachable, check_reachable, emulator_source, rpc_failure

__all__ = ["build_parser", "main", "tail"]

PROG = "crdb-pubsub"


def build_parser() -> argparse.ArgumentParser:
    """Build the full ``crdb-pubsub`` parser (``simulate`` is parsed by the simulator's own parser)."""
    from crdb_pubsub._version import __version__
    from crdb_pubsub.decode.vocabulary import ENVELOPES

    parser = _Parser(
        prog=PROG,
        description="CockroachDB changefeeds on Google Cloud Pub/Sub: inspect, simulate, and run the local emulator.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}", help="print the version")
    # "cmd", not "command": the embedded emulator parser uses "command" for start/stop/env/run.
    sub = parser.add_subparsers(dest="cmd", metavar="{tail,simulate,emulator}", parser_class=_Parser)
    sub.required = True

    t = sub.add_parser(
        "tail",
        help="print the messages waiting on a subscription, decoded, without consuming them",
        description="Pull up to --limit messages, decode them as the Spark source would (decode_messages) and "
        "print them; then set their ack deadline back to 0 so Pub/Sub redelivers them at once to "
        "the real consumer. Nothing is acknowledged. While tail runs (a few seconds), the messages it "
        "holds are not delivered to other subscribers of the same subscription. Credentials: "
        "Application Default Credentials (gcloud auth application-default login, or the attached "
        "service account), --credentials-file, or the emulator (--emulator-host / "
        "PUBSUB_EMULATOR_HOST).",
    )
    t.add_argument("--subscription", required=True, help="projects/P/subscriptions/S, or a bare id with --project")
    t.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT"),
        help="project of a bare subscription id (default: $GOOGLE_CLOUD_PROJECT)",
    )
    t.add_argument(
        "--emulator-host",
        default=None,
        help="host:port of a Pub/Sub emulator (default: $PUBSUB_EMULATOR_HOST; unset = real Pub/Sub)",
    )
    t.add_argument(
        "--credentials-file", default=None, help="service-account key file (default: Application Default Credentials)"
    )
    t.add_argument("--limit", type=_positive_int, default=20, help="messages to show at most (default 20)")
    t.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table (default; one line per change, truncated to the terminal) or json (one JSON "
        "object per line, before/after/key as the exact JSON CockroachDB sent)",
    )
    t.add_argument(
        "--envelope",
        choices=ENVELOPES,
        default="auto",
        help="force an envelope (default auto: detected per message); csv needs --row-schema",
    )
    t.add_argument(
        "--row-schema",
        default=None,
        metavar="DDL",
        help="the columns as Spark DDL, e.g. 'id INT, name STRING': before/after become typed; "
        "required with --envelope csv (CSV lines carry no column names)",
    )
    t.add_argument(
        "--wait",
        type=_positive_float,
        default=3.0,
        help="seconds to wait for messages when none are available (default 3)",
    )

    sub.add_parser(
        "simulate",
        add_help=False,
        help="publish simulated CockroachDB changefeed traffic (movr tables) to an emulator",
        description="See `crdb-pubsub simulate --help`.",
    )

    from crdb_pubsub.emulator.__main__ import configure_parser

    e = sub.add_parser(
        "emulator",
        help="start/stop/locate the local Pub/Sub emulator",
        description="Start, stop and locate the Google Cloud Pub/Sub emulator. `start` prints "
        '`export PUBSUB_EMULATOR_HOST=...`: use eval "$(crdb-pubsub emulator start)".',
    )
    e.add_argument("-v", "--verbose", action="store_true", help="log backend choice and timings")
    configure_parser(e)
    return parser


# --------------------------------------------------------------------------------------------
# tail
# --------------------------------------------------------------------------------------------


# The source's options tail sets, and the flags they come from: its errors are said in the CLI's words.
_FLAGS = {
    "subscription": "--subscription",
    "projectId": "--project",
    "emulatorHost": "--emulator-host",
    "credentialsFile": "--credentials-file",
    "rowSchema": "--row-schema",
    "envelope": "--envelope",
}


def in_flags(text: str) -> str:
    """Say a source error (written for Spark's options) in the CLI's flags, on one line."""
    text = text.replace("crdb_pubsub: ", "").splitlines()[0]
    text = text.replace("; accepted: see the README's option table", "")
    # "option 'emulatorHost'='x' is not accepted" -> "--emulator-host 'x' is not accepted"
    text = re.sub(r"option '(\w+)'=", lambda m: _FLAGS.get(m.group(1), m.group(1)) + " ", text)
    text = re.sub(r"option '(\w+)'", lambda m: _FLAGS.get(m.group(1), m.group(1)), text)
    for name, flag in _FLAGS.items():
        if name != name.lower():  # camelCase names never occur in prose
            text = re.sub(rf"\b{name}\b", flag, text)
    return re.sub(r"^subscription\b", "--subscription", text)


def _source_options(args: argparse.Namespace) -> Any:
    from crdb_pubsub.source.options import parse_options

    if args.envelope == "csv" and not args.row_schema:
        raise UsageError(
            "--envelope csv needs --row-schema: CSV lines carry no column names (e.g. --row-schema 'id INT, name STRING')"
        )
    raw = {"subscription": args.subscription, "envelope": args.envelope}
    if args.project:
        raw["projectId"] = args.project
    if args.emulator_host:
        raw["emulatorHost"] = args.emulator_host
    if args.credentials_file:
        raw["credentialsFile"] = args.credentials_file
    if args.row_schema:
        raw["rowSchema"] = args.row_schema
    try:
        opts = parse_options(raw)
    except ValueError as exc:
        raise UsageError(in_flags(str(exc))) from None
    paths = opts.subscription_paths
    if len(paths) != 1:
        raise UsageError("tail reads one subscription at a time")
    return opts, paths[0]


def tail(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Pull, decode, print, then hand every pulled message back (ack deadline 0). Returns the exit code."""
    from google.api_core import exceptions as gexc

    from crdb_pubsub import decode_messages
    from crdb_pubsub.source.transport import CredentialsError, chunk_ack_ids, load_credentials, subscriber_client

    opts, subscription = _source_options(args)
    try:
        creds = load_credentials(**opts.credential_kwargs())
    except CredentialsError as exc:
        if args.credentials_file:  # the file the user named: their mistake
            raise UsageError(in_flags(str(exc))) from None
        print(f"error: {exc}", file=err)  # no Application Default Credentials here: the environment's
        return 1
    host = opts.effective_emulator_host
    if host:
        origin = emulator_source(args.emulator_host, os.environ.get("PUBSUB_EMULATOR_HOST"))
        where = f"the emulator at {host} ({origin})"
        check_reachable(host, origin)
    else:
        where = "Pub/Sub at pubsub.googleapis.com"
    client = subscriber_client(host, creds)
    received: list[Any] = []
    try:
        try:  # the subscription exists, and the host answers within a deadline
            client.get_subscription(request={"subscription": subscription}, timeout=RPC_SECONDS, retry=None)
        except gexc.NotFound:
            raise UsageError(f"subscription {subscription} does not exist") from None
        except gexc.PermissionDenied:
            pass  # roles/pubsub.subscriber may pull without being allowed to get: the pull says
        except gexc.GoogleAPICallError as exc:
            raise rpc_failure(exc, where) from None
        while len(received) < args.limit:
            try:
                resp = client.pull(
                    request={"subscription": subscription, "max_messages": min(1000, args.limit - len(received))},
                    timeout=args.wait,
                    retry=None,
                )
            except gexc.DeadlineExceeded:
                break  # nothing (more) waiting (the host answered get_subscription)
            except gexc.NotFound:
                raise UsageError(f"subscription {subscription} does not exist") from None
            except gexc.PermissionDenied:
                print(f"error: permission denied on {subscription}: the caller needs roles/pubsub.subscriber", file=err)
                return 1
            except gexc.GoogleAPICallError as exc:
                raise rpc_failure(exc, where) from None
            if not resp.received_messages:
                break
            received.extend(resp.received_messages)
        if not received:
            print(f"no messages waiting on {subscription} (waited {args.wait:g} s)", file=err)
            return 0
        msgs = [rm.message for rm in received]
        batch = decode_messages(
            [m.data for m in msgs],
            envelope=args.envelope,
            row_schema=args.row_schema,
            message_ids=[m.message_id for m in msgs],
            publish_times=[_publish_time(m) for m in msgs],
            attributes=[dict(m.attributes) for m in msgs],
            ordering_keys=[m.ordering_key for m in msgs],
        )
        rows = batch.to_pylist()
        if args.format == "json":
            for r in rows:
                out.write(_json_line(r) + "\n")
        else:
            _print_table(rows, out)
        print(
            f"{len(msgs)} message(s) shown, {len(rows)} row(s); none acknowledged (handed back for redelivery)",
            file=err,
        )
        return 0
    finally:
        if received:
            # Deadline 0 = "not mine": Pub/Sub redelivers at once, to the real consumer.
            ack_ids = [rm.ack_id for rm in received]
            for chunk in chunk_ack_ids(ack_ids):
                try:
                    client.modify_ack_deadline(
                        request={"subscription": subscription, "ack_ids": chunk, "ack_deadline_seconds": 0},
                        timeout=RPC_SECONDS,
                        retry=None,
                    )
                except gexc.GoogleAPICallError as exc:
                    print(
                        f"warning: could not hand {len(chunk)} message(s) back ({type(exc).__name__}); they "
                        f"return after the subscription's ack deadline",
                        file=err,
                    )
        client.transport.close()


def _publish_time(m: Any) -> _dt.datetime | None:
    pt = m.publish_time
    if pt is None:
        return None
    return pt if pt.tzinfo else pt.replace(tzinfo=_dt.UTC)


_RAW_JSON = ("key", "before", "after", "source")


def _typed_text(v: Any) -> Any:
    """Return a typed (``--row-schema``) before/after as JSON text; exact decimals stay as written."""
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, default=str)


def _json_line(row: dict[str, Any]) -> str:
    # before/after/key/source are exact JSON text from the message: spliced in, never re-encoded
    # (a float round trip would change DECIMAL and INT8 digits).
    row = {k: _typed_text(v) if k in _RAW_JSON else v for k, v in row.items()}
    obj: dict[str, Any] = {}
    for k, v in row.items():
        if k in _RAW_JSON or v is None:
            continue
        if isinstance(v, _dt.datetime):
            v = v.isoformat().replace("+00:00", "Z")
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list):  # Arrow map -> list of pairs
            v = dict(v)
        obj[k] = v
    text = json.dumps(obj, ensure_ascii=False)
    raw = [f'"{k}": {row[k]}' for k in _RAW_JSON if row.get(k) is not None and _is_json(row[k])]
    raw += [
        f'"{k}": {json.dumps(row[k], ensure_ascii=False)}'
        for k in _RAW_JSON
        if row.get(k) is not None and not _is_json(row[k])
    ]
    if raw:
        text = text[:-1] + (", " if obj else "") + ", ".join(raw) + "}"
    return text


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    width = max(80, shutil.get_terminal_size((160, 20)).columns)
    headers = ("publish_time", "table", "op", "commit (HLC)", "key", "after / detail")
    lines = []
    for r in rows:
        r = {k: _typed_text(v) if k in ("before", "after") else v for k, v in r.items()}
        pt = r["publish_time"].strftime("%H:%M:%S.%f")[:-3] if r.get("publish_time") else ""
        table = r.get("table_name") or r.get("topic") or ""
        if r["kind"] == "row":
            detail = r["after"] if r.get("after") is not None else "(deleted)"
            op = r.get("op") or ""
        elif r["kind"] == "resolved":
            op, detail = "resolved", f"resolved {r.get('resolved')}"
        elif r["kind"] == "malformed":
            op, detail = "MALFORMED", r.get("error") or ""
        else:
            op, detail = r["kind"], r.get("after") or r.get("source") or ""
        lines.append((pt, table, op, r.get("updated") or r.get("mvcc_timestamp") or "", r.get("key") or "", detail))
    fixed = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers[:-1])]
    fixed[4] = min(fixed[4], 48)  # long composite keys are truncated like `after`
    rest = max(20, width - sum(fixed) - 2 * len(fixed))

    def fmt(cells: Sequence[str]) -> str:
        parts = [_clip(c, w).ljust(w) for c, w in zip(cells[:-1], fixed)]
        return "  ".join(parts + [_clip(cells[-1], rest)]).rstrip()

    out.write(fmt(headers) + "\n")
    for line in lines:
        out.write(fmt(line) + "\n")


def _clip(text: str, width: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


# --------------------------------------------------------------------------------------------
# simulate / emulator
# --------------------------------------------------------------------------------------------


def _simulate(argv: Sequence[str], err: TextIO) -> int:
    from crdb_pubsub.tools import simulator

    prog = f"{PROG} simulate"
    # Validate with the simulator's own parser (one-line errors), then let its main() run it.
    parser = simulator.build_arg_parser(prog)
    parser.__class__ = _Parser
    args = parser.parse_args(list(argv))
    simulator.checked_simulator(parser, args)
    if not args.dry_run and not args.emulator_host:
        parser.error("--emulator-host is required (or set PUBSUB_EMULATOR_HOST)")
    return simulator.main(list(argv), prog=prog)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crdb-pubsub`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out, err = sys.stdout, sys.stderr
    try:
        if argv and argv[0] == "simulate":
            return _simulate(argv[1:], err)
        args = build_parser().parse_args(argv)
        if args.cmd == "tail":
            return tail(args, out, err)
        if args.cmd == "emulator":
            import logging

            from crdb_pubsub.emulator.__main__ import dispatch

            logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
            return dispatch(args, out, err)
        raise UsageError(f"unknown command {args.cmd!r}")  # pragma: no cover - argparse rejects it first
    except (UsageError, Unreachable) as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130
    except BrokenPipeError:  # `crdb-pubsub tail | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
