"""Tests for the Pub/Sub emulator launcher (crdb_pubsub.emulator).

Integration tests run the real emulator; without one they skip, unless
CRDB_PUBSUB_REQUIRE_EMULATOR=1 (CI), where they fail. The process checks read /proc (Linux).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crdb_pubsub.emulator import (
    EmulatorStartError,
    EmulatorUnavailable,
    create_topic_and_subscription,
    emulator,
    launcher,
    pubsub_clients,
    start_emulator,
)
from emulator_policy import emulator_required, start_emulator_or_skip
from polling import wait_for

PY = sys.executable
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc")


# --------------------------------------------------------------------------- helpers


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                pids.append(int(entry.name))
    return pids


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def listening(port: int) -> bool:
    """True if any socket on this machine LISTENs on ``port`` (/proc/net/tcp{,6}, state 0A)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def connectable(host_port: str) -> bool:
    host, port = host_port.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


def assert_fully_gone(pid: int, pgid: int, host_port: str, timeout: float = 10.0) -> None:
    port = int(host_port.rsplit(":", 1)[1])
    wait_for(
        lambda: not group_members(pgid) and not pid_alive(pid),
        timeout,
        lambda: f"the emulator's processes to end (left in group {pgid}: {group_members(pgid)})",
        interval=0.05,
    )
    wait_for(lambda: not listening(port), 5.0, f"nothing to listen on {port}", interval=0.05)
    assert not connectable(host_port)


def round_trip(host_port: str, name: str) -> None:
    topic, sub = create_topic_and_subscription(host_port, "test-project", f"topic-{name}", f"sub-{name}")
    publisher, subscriber = pubsub_clients(host_port)
    try:
        publisher.publish(topic, b"hello", k="v").result(timeout=10)
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 10}, timeout=10)
        assert [(m.message.data, dict(m.message.attributes)) for m in resp.received_messages] == [
            (b"hello", {"k": "v"})
        ]
        subscriber.acknowledge(request={"subscription": sub, "ack_ids": [resp.received_messages[0].ack_id]})
    finally:
        publisher.stop()
        publisher.transport.close()
        subscriber.close()


def sdk_or_skip() -> None:
    """Skip (or fail under CRDB_PUBSUB_REQUIRE_EMULATOR=1) unless the SDK emulator is installed."""
    looked: list[str] = []
    if launcher.find_sdk_emulator(looked) is None:
        msg = "Cloud SDK Pub/Sub emulator not installed: " + "; ".join(looked)
        if emulator_required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("PUBSUB_EMULATOR_HOST", "CRDB_PUBSUB_EMULATOR_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def nothing_installed(clean_env, tmp_path):
    """An SDK search that finds nothing and a Docker engine that cannot answer."""
    empty = tmp_path / "empty-sdk"
    empty.mkdir()
    clean_env.setenv("CLOUDSDK_ROOT_DIR", str(empty))
    clean_env.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    clean_env.delenv("CRDB_PUBSUB_REQUIRE_EMULATOR", raising=False)
    return empty


def fake_sdk(root: Path, body: str) -> Path:
    """An SDK root whose emulator script is ``body`` (a shell script)."""
    script = root / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return root


# --------------------------------------------------------------------------- without an emulator


def test_nothing_available_raises_with_install_hint_quickly(nothing_installed):
    t0 = time.monotonic()
    with pytest.raises(EmulatorUnavailable) as info:
        start_emulator(timeout=30)
    elapsed = time.monotonic() - t0
    msg = str(info.value)
    assert "google-cloud-cli-pubsub-emulator" in msg and "Java 17" in msg
    assert "gcloud components install pubsub-emulator" in msg and "Docker" in msg
    assert str(nothing_installed) in msg, "must say where it looked"
    assert "PUBSUB_EMULATOR_HOST: not set" in msg
    assert elapsed < 10, f"took {elapsed:.1f}s"


def test_forced_backends_and_bad_values(nothing_installed, monkeypatch):
    with pytest.raises(EmulatorUnavailable, match="'env' was forced"):
        start_emulator(backend="env")
    with pytest.raises(EmulatorUnavailable, match="'sdk' was forced"):
        start_emulator(backend="sdk")
    monkeypatch.setenv("CRDB_PUBSUB_EMULATOR_BACKEND", "docker")
    with pytest.raises(EmulatorUnavailable, match="'docker' was forced"):
        start_emulator()
    with pytest.raises(ValueError, match="unknown emulator backend"):
        start_emulator(backend="fake")
    monkeypatch.setenv("CRDB_PUBSUB_EMULATOR_BACKEND", "memory")
    with pytest.raises(ValueError, match="CRDB_PUBSUB_EMULATOR_BACKEND"):
        start_emulator()
    with pytest.raises(ValueError, match="port"):
        start_emulator(port=70000)


def test_skip_policy(nothing_installed, monkeypatch):
    with pytest.raises(pytest.skip.Exception, match="no Pub/Sub emulator available"):
        start_emulator_or_skip()
    monkeypatch.setenv("CRDB_PUBSUB_REQUIRE_EMULATOR", "1")
    with pytest.raises(pytest.fail.Exception, match="CRDB_PUBSUB_REQUIRE_EMULATOR=1"):
        start_emulator_or_skip()


@linux_only
def test_emulator_that_dies_reports_exit_code_and_log(clean_env, tmp_path):
    clean_env.setenv("CLOUDSDK_ROOT_DIR", str(fake_sdk(tmp_path, 'echo "boom: no such jar"; exit 3\n')))
    with pytest.raises(EmulatorStartError) as info:
        start_emulator(backend="sdk", timeout=10)
    assert "exited with code 3" in str(info.value) and "boom: no such jar" in str(info.value)


@linux_only
def test_startup_timeout_kills_the_whole_group(clean_env, tmp_path):
    # The fake never becomes ready and has a child of its own: both must be gone after the error.
    marker = tmp_path / "pids"
    clean_env.setenv(
        "CLOUDSDK_ROOT_DIR",
        str(
            fake_sdk(
                tmp_path,
                f"""
        sleep 300 &
        echo "$$ $!" > {marker}
        echo "starting slowly"
        wait
    """,
            )
        ),
    )
    t0 = time.monotonic()
    with pytest.raises(EmulatorStartError, match="did not log") as info:
        start_emulator(backend="sdk", timeout=1.5)
    assert time.monotonic() - t0 < 10
    assert "starting slowly" in str(info.value)
    shell_pid, child_pid = map(int, marker.read_text().split())
    wait_for(lambda: not group_members(shell_pid), 5, "the slow starter's process group to end", interval=0.05)
    assert not pid_alive(child_pid)


def test_env_backend_fails_clearly_on_a_dead_address(clean_env):
    port = launcher.free_port()
    clean_env.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{port}")
    with pytest.raises(EmulatorStartError, match="PUBSUB_EMULATOR_HOST"):
        start_emulator(timeout=1.0)


# --------------------------------------------------------------------------- with the real emulator


@pytest.mark.integration
@linux_only
def test_sdk_round_trip_and_stop_leaves_nothing(clean_env, caplog):
    sdk_or_skip()
    caplog.set_level("INFO", logger="crdb_pubsub.emulator")
    emu = start_emulator(backend="sdk")
    try:
        assert emu.backend == "sdk" and emu.pid == emu.pgid
        assert emu.host_port.startswith("127.0.0.1:")
        assert 0 < emu.startup_seconds < 60
        assert "backend=sdk" in caplog.text and "startup=" in caplog.text
        assert group_members(emu.pgid), "emulator group should be alive"
        round_trip(emu.host_port, "sdk")
    finally:
        emu.stop()
    assert_fully_gone(emu.pid, emu.pgid, emu.host_port)
    emu.stop()  # idempotent


@pytest.mark.integration
def test_env_variable_is_used_as_is(clean_env):
    sdk_or_skip()
    with emulator(backend="sdk") as host_port:
        clean_env.setenv("PUBSUB_EMULATOR_HOST", host_port)

        def must_not_start(*a, **k):
            raise AssertionError("nothing may be started when PUBSUB_EMULATOR_HOST is set")

        clean_env.setattr(launcher, "_start_sdk", must_not_start)
        clean_env.setattr(launcher, "_start_docker", must_not_start)
        borrowed = start_emulator()
        assert (borrowed.backend, borrowed.host_port, borrowed.pid, borrowed.container_id) == (
            "env",
            host_port,
            None,
            None,
        )
        borrowed.stop()
        round_trip(host_port, "env")  # stop() of a borrowed emulator leaves it running


@pytest.mark.integration
@linux_only
@pytest.mark.parametrize("thread", ["main", "worker"])
def test_sigkilled_launcher_takes_the_jvm_down(clean_env, thread):
    # main: PR_SET_PDEATHSIG and the watchdog both armed; worker: only the watchdog (PDEATHSIG
    # is per-thread, so it is deliberately not armed off the main thread).
    sdk_or_skip()
    script = textwrap.dedent(f"""
        import json, sys, threading, time
        from crdb_pubsub.emulator import start_emulator
        box = {{}}
        def go():
            box["e"] = start_emulator(backend="sdk")
        if {thread == "worker"!r}:
            t = threading.Thread(target=go); t.start(); t.join()
        else:
            go()
        e = box["e"]
        print(json.dumps({{"pid": e.pid, "pgid": e.pgid, "host_port": e.host_port}}), flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert group_members(info["pgid"]) and connectable(info["host_port"])
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=5)
        assert_fully_gone(info["pid"], info["pgid"], info["host_port"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.integration
@linux_only
def test_shell_start_env_stop_round_trip(clean_env, tmp_path):
    sdk_or_skip()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "CRDB_PUBSUB_EMULATOR_BACKEND": "sdk"}
    env.pop("PUBSUB_EMULATOR_HOST", None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PY, "-m", "crdb_pubsub.emulator", *args], env=env, capture_output=True, text=True, timeout=90
        )

    state_file = tmp_path / "crdb-pubsub" / "emulator.json"
    started = cli("start")
    try:
        assert started.returncode == 0, started.stderr
        line = started.stdout.strip()
        assert line.startswith("export PUBSUB_EMULATOR_HOST=127.0.0.1:")
        host_port = line.split("=", 1)[1]
        state = json.loads(state_file.read_text())
        assert state["host_port"] == host_port and state["backend"] == "sdk"
        assert cli("env").stdout.strip() == line
        again = cli("start")  # idempotent: reports the running one
        assert again.returncode == 0 and again.stdout.strip() == line
        round_trip(host_port, "cli")
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not state_file.exists()
    assert_fully_gone(state["pid"], state["pgid"], host_port)
    gone = cli("env")
    assert gone.returncode == 1 and "no emulator is running" in gone.stderr
    assert cli("stop").returncode == 0


@pytest.mark.integration
@linux_only
def test_shell_run_stops_on_ctrl_c(clean_env, tmp_path):
    sdk_or_skip()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "CRDB_PUBSUB_EMULATOR_BACKEND": "sdk"}
    env.pop("PUBSUB_EMULATOR_HOST", None)
    proc = subprocess.Popen(
        [PY, "-m", "crdb_pubsub.emulator", "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("export PUBSUB_EMULATOR_HOST="), proc.stderr.read() if proc.poll() else line
        state = json.loads((tmp_path / "crdb-pubsub" / "emulator.json").read_text())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert_fully_gone(state["pid"], state["pgid"], state["host_port"])
        assert not (tmp_path / "crdb-pubsub" / "emulator.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_usage_errors_are_one_line_exit_2(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    for args in (["start", "--port", "0"], ["bogus"], [], ["start", "--backend", "fake"]):
        r = subprocess.run(
            [PY, "-m", "crdb_pubsub.emulator", *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for args in (["--help"], ["start", "--help"], ["stop", "--help"], ["env", "--help"], ["run", "--help"]):
        r = subprocess.run(
            [PY, "-m", "crdb_pubsub.emulator", *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0 and "usage:" in r.stdout


def test_auto_falls_through_to_docker_with_the_official_image(nothing_installed, monkeypatch):
    # No Docker engine on the CI machines: check the wiring with a stand-in container.
    import testcontainers.core.container as tc_container
    import testcontainers.core.waiting_utils as tc_wait

    seen: dict = {}

    class FakeContainer:
        def __init__(self, image):
            seen["image"] = image

        def with_command(self, cmd):
            seen["command"] = cmd
            return self

        def with_kwargs(self, **kw):
            return self

        def with_exposed_ports(self, *ports):
            seen["exposed"] = ports
            return self

        def start(self):
            seen["started"] = True

        def stop(self):
            seen["stopped"] = True

        def get_wrapped_container(self):
            return type("C", (), {"id": "abc123def456789"})()

        def get_container_host_ip(self):
            return "localhost"

        def get_exposed_port(self, port):
            return 49153

    monkeypatch.setattr(launcher, "docker_available", lambda looked=None: True)
    monkeypatch.setattr(tc_container, "DockerContainer", FakeContainer)
    monkeypatch.setattr(tc_wait, "wait_for_logs", lambda c, pred, **kw: seen.setdefault("waited_for", pred))
    monkeypatch.setattr(launcher, "_wait_grpc", lambda *a, **k: None)
    with start_emulator() as emu:
        assert (emu.backend, emu.host_port, emu.container_id) == ("docker", "127.0.0.1:49153", "abc123def456789")
    assert seen["image"] == "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators"
    assert seen["command"].startswith("gcloud beta emulators pubsub start --host-port=0.0.0.0:8085")
    assert seen["waited_for"] == "Server started, listening on 8085"
    assert seen["exposed"] == (8085,) and seen["stopped"]
