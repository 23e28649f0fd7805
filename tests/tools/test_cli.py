"""The ``crdb-pubsub`` console script, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
