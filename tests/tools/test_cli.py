"""The ``crdb-pubsub`` console script, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import PROJECT, pull_ids

SCRIPT = str(Path(sys.executable).with_name("crdb-pubsub"))


def run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    full_env.update(env or {})
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["tail"],
        ["simulate"],
        ["emulator"],
        ["emulator", "start"],
        ["emulator", "stop"],
        ["emulator", "env"],
    ],
)
def test_help_for_every_command(command):
    res = run(*command, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: crdb-pubsub" + "".join(" " + c for c in command))
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["tail"], "--subscription"),
        (["tail", "--subscription", "my-sub"], "--project"),
        (["tail", "--subscription", "projects/p/subscriptions/s", "--limit", "0"], "--limit"),
        (["tail", "--subscription", "projects/p/subscriptions/s", "--format", "xml"], "--format"),
        (["simulate", "--rows", "many"], "--rows"),
        (["simulate", "--rows", "5"], "--emulator-host"),
        (["simulate", "--dry-run", "--envelope", "wraped"], "--envelope"),
        (["simulate", "--dry-run", "--resolved-every", "-1"], "--resolved-every"),
        (["simulate", "--dry-run", "--mix", "x"], "--mix"),
        (["simulate", "--dry-run", "--tables", "nope"], "--tables"),
        (["simulate", "--rate", "0", "--emulator-host", "127.0.0.1:1"], "--rate"),
        (["simulate", "--duplicate-fraction", "2", "--emulator-host", "127.0.0.1:1"], "--duplicate-fraction"),
        (["simulate", "--shuffle-window", "-2", "--emulator-host", "127.0.0.1:1"], "--shuffle-window"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(args, fragment):
    res = run(*args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert fragment in lines[0] and "Traceback" not in res.stderr


def test_simulate_dry_run_reuses_the_simulator():
    res = run("simulate", "--dry-run", "--rows", "3", "--tables", "users", "--updated")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith('users\t{"Key":') for line in lines)


@pytest.mark.integration
def test_tail_prints_decoded_rows_and_leaves_messages_unconsumed(emulator_host, make_subscription, publish):
    from crdb_pubsub.tools.simulator import ChangefeedSimulator

    topic, sub = make_subscription(ack_deadline_seconds=60)
    sim = ChangefeedSimulator(seed=3, tables=["vehicles"], updated=True, diff=True, resolved_every=4)
    msgs = list(sim.events(8))
    ids = publish(topic, [m.data for m in msgs])

    # A 60 s ack deadline: only tail's explicit hand-back (deadline 0) makes them pullable at once.
    res = run(
        "tail",
        "--subscription",
        sub,
        "--limit",
        "50",
        "--format",
        "json",
        "--wait",
        "2",
        env={"PUBSUB_EMULATOR_HOST": emulator_host},
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert {r["message_id"] for r in rows} == set(ids)
    by_id = {r["message_id"]: r for r in rows}
    for mid, m in zip(ids, msgs):
        r = by_id[mid]
        assert r["kind"] == m.kind
        if m.kind == "row":
            assert r["table_name"] == "vehicles" and r["updated"] == m.hlc
            # Exact JSON: INT8 odometers beyond 2^53 keep every digit.
            raw_after = json.loads(m.data)["Value"]["after"]
            assert r["after"] == raw_after
    assert sorted(pull_ids(emulator_host, sub, timeout=3.0)) == sorted(ids), "tail consumed messages"


@pytest.mark.integration
def test_tail_table_format_via_flag(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=60)
    publish(
        topic,
        [
            b'{"Key":[7],"Value":{"after": {"id": 7, "price": 26.30}, "updated": "1.0000000002"},"Topic":"items"}',
            b"not json",
        ],
    )
    res = run(
        "tail",
        "--subscription",
        sub.split("/")[-1],
        "--project",
        PROJECT,
        "--emulator-host",
        emulator_host,
        "--wait",
        "2",
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0].split()[:3] == ["publish_time", "table", "op"]
    assert any("items" in line and "26.30" in line and "[7]" in line for line in out)
    assert any("MALFORMED" in line for line in out)
    assert len(pull_ids(emulator_host, sub, timeout=3.0)) == 2


@pytest.mark.integration
def test_tail_unknown_subscription_is_a_usage_error(emulator_host):
    res = run(
        "tail",
        "--subscription",
        f"projects/{PROJECT}/subscriptions/does-not-exist",
        "--emulator-host",
        emulator_host,
        "--wait",
        "1",
    )
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "does not exist" in res.stderr


def test_emulator_env_without_one_running(tmp_path):
    res = run("emulator", "env", env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "no emulator is running" in res.stderr


# ---- issue 31: a CLI that fails fast and speaks its own language ---------------------------------


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--emulator-host", "127.0.0.1:1", "--rows", "5"],
        ["tail", "--subscription", "projects/p/subscriptions/sub-x", "--emulator-host", "127.0.0.1:1"],
    ],
    ids=["simulate", "tail"],
)
def test_an_unreachable_host_is_one_line_naming_it_and_the_cause(args):
    """The user's report: ``simulate --emulator-host 127.0.0.1:1`` hung 600 s, then a 60-line traceback."""
    start = time.monotonic()
    res = run(*args, timeout=60)
    took = time.monotonic() - start
    line = _one_line(res)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "127.0.0.1:1" in line and "refused" in line, line
    assert took < 15, took


@pytest.fixture
def silent_host():
    """A port that accepts connections and never says a word (a firewall, a wrong service)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        srv.close()


@pytest.mark.integration  # waits out the CLI's deadline: ~10 s of real time
@pytest.mark.parametrize("command", ["simulate", "tail"])
def test_a_host_that_never_answers_gives_up_within_15_s(silent_host, command):
    """Every RPC the CLI makes has a deadline: a host that accepts and never answers is named."""
    if command == "simulate":
        args = ["simulate", "--emulator-host", silent_host, "--rows", "5"]
    else:
        args = ["tail", "--subscription", "projects/p/subscriptions/sub-x", "--emulator-host", silent_host]
    start = time.monotonic()
    res = run(*args, timeout=60)
    took = time.monotonic() - start
    line = _one_line(res)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert silent_host in line and "did not answer" in line, line
    assert took < 15, took


def test_a_bad_credentials_file_is_a_user_mistake_naming_the_flag(tmp_path):
    bad = tmp_path / "key.json"
    bad.write_text('{"type": "service_account", "private_key": "SECRET-SHOULD-NOT-APPEAR"}')
    for path in (str(bad), str(tmp_path / "missing.json")):
        res = run("tail", "--subscription", "projects/p/subscriptions/sub-x", "--credentials-file", path)
        line = _one_line(res)
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert "--credentials-file" in line and "credentialsFile" not in line, line
        assert "SECRET" not in res.stderr and path not in res.stderr


# Spark's option names: a CLI error names the CLI's flags instead.
_SPARK_NAMES = ("emulatorHost", "projectId", "credentialsFile", "rowSchema", "README's option table")


@pytest.mark.parametrize(
    "args, flag",
    [
        (
            ["tail", "--subscription", "projects/p/subscriptions/sub-x", "--emulator-host", "localhost"],
            "--emulator-host",
        ),
        (["tail", "--subscription", "sub-x"], "--project"),
        (["tail", "--subscription", "projects/p/subscriptions/x"], "--subscription"),
        (["tail", "--subscription", "projects/p/subscriptions/sub-x", "--envelope", "csv"], "--row-schema"),
        (
            ["tail", "--subscription", "projects/p/subscriptions/sub-x", "--row-schema", "id WIBBLE"],
            "--row-schema",
        ),
    ],
)
def test_cli_errors_name_the_cli_flags_not_spark_options(args, flag):
    res = run(*args)
    line = _one_line(res)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert flag in line, line
    assert not any(name in line for name in _SPARK_NAMES), line


def test_version_prints_the_package_version():
    from crdb_pubsub._version import __version__

    res = run("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"crdb-pubsub {__version__}"


def _parsers():
    from crdb_pubsub.tools import simulator
    from crdb_pubsub.tools.cli import build_parser

    todo = [("crdb-pubsub", build_parser()), ("crdb-pubsub simulate", simulator.build_arg_parser())]
    while todo:
        name, parser = todo.pop()
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{name} {sub}", p) for sub, p in action.choices.items() if p.add_help)


def test_every_flag_has_help():
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, parser in _parsers()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert not missing, missing


@pytest.mark.integration
def test_simulate_creates_the_subscriptions_tail_reads(emulator_host):
    project = f"sim-subs-{uuid.uuid4().hex[:6]}"
    res = run("simulate", "--emulator-host", emulator_host, "--project", project, "--rows", "6", "--tables", "users")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["subscriptions"] == [f"projects/{project}/subscriptions/users-spark"]
    res = run(
        "tail",
        "--subscription",
        f"projects/{project}/subscriptions/users-spark",
        "--emulator-host",
        emulator_host,
        "--format",
        "json",
        "--wait",
        "2",
    )
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 6


@pytest.mark.integration
def test_tail_decodes_csv_with_row_schema(emulator_host, make_subscription, publish):
    topic, sub = make_subscription(ack_deadline_seconds=60)
    publish(topic, [b"1,alice", b"2,bob"])
    res = run(
        "tail",
        "--subscription",
        sub,
        "--emulator-host",
        emulator_host,
        "--envelope",
        "csv",
        "--row-schema",
        "id INT, name STRING",
        "--format",
        "json",
        "--wait",
        "2",
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted((r["kind"], r["after"]["id"], r["after"]["name"]) for r in rows) == [
        ("row", 1, "alice"),
        ("row", 2, "bob"),
    ]
