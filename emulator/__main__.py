"""``python -m crdb_pubsub.emulator start|env|stop|run``: the emulator from the shell.

Exit codes: 0 success; 1 the emulator is unavailable, failed to start, or (``env``) is not
running; 2 usage errors. Errors are one line on stderr (the install hint may add a few), never a
traceback. :func:`configure_parser` and :func:`dispatch` let another CLI embed these commands.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from .detached import (
    export_line,
    remove_state,
    running_state,
    start_detached,
    state_from,
    state_path,
    stop_detached,
    write_state,
)
from .launcher import BACKENDS, EmulatorStartError, EmulatorUnavailable, start_emulator


class UsageError(Exception):
    """A mistake in how the command was called (exit code 2)."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse with a one-line error (exit 2) instead of the usage dump; shared by the CLIs."""

    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage dump; --help has the details.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def argument_type(
    convert: Callable[[str], Any], not_a: str, ok: Callable[[Any], bool], must: str
) -> Callable[[str], Any]:
    """Make an argparse ``type=`` that converts and range-checks, with one-line errors (both CLIs use it)."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{not_a}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{must}, got {value}")
        return value

    return parse


_port = argument_type(int, "not a port number", lambda v: 1 <= v <= 65535, "port must be in 1..65535")
positive_number = argument_type(float, "not a number", lambda v: v > 0, "must be positive")
positive_integer = argument_type(int, "not an integer", lambda v: v > 0, "must be positive")


def _add_start_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=_port, default=None, help="fixed port (default: a free loopback port)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto (default; CRDB_PUBSUB_EMULATOR_BACKEND may force one), env, sdk or docker",
    )
    p.add_argument("--project", default="local-project", help="project id for the readiness probe")
    p.add_argument("--timeout", type=positive_number, default=60.0, help="startup timeout in seconds (default 60)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``start``/``env``/``stop``/``run`` subcommands to ``parser`` (for embedding CLIs)."""
    sub = parser.add_subparsers(dest="command", metavar="{start,env,stop,run}", parser_class=OneLineErrorParser)
    sub.required = True
    p = sub.add_parser(
        "start",
        help="start a detached emulator and print its export line",
        description="Start the emulator in the background (its own session), record it in "
        f"{state_path()}, and print `export PUBSUB_EMULATOR_HOST=...`. "
        'If one is already running, print its line. Use: eval "$(... start)"',
    )
    _add_start_options(p)
    sub.add_parser(
        "env",
        help="print the export line of the running emulator",
        description="Print `export PUBSUB_EMULATOR_HOST=...` for the emulator started by `start`/`run`.",
    )
    p = sub.add_parser(
        "stop",
        help="stop the detached emulator (whole process group) and forget it",
        description="Stop the emulator recorded by `start` (or a `run` elsewhere). Succeeds if nothing is running.",
    )
    p.add_argument("--grace", type=positive_number, default=5.0, help="seconds between SIGTERM and SIGKILL")
    p = sub.add_parser(
        "run",
        help="run the emulator in the foreground until Ctrl-C",
        description="Start the emulator, print its export line, and stop it on Ctrl-C or SIGTERM.",
    )
    _add_start_options(p)


def cmd_start(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``start``: detached launch; prints the export line on ``out``."""
    state, started = start_detached(port=args.port, backend=args.backend, project=args.project, timeout=args.timeout)
    if state.backend == "env":
        print(f"PUBSUB_EMULATOR_HOST is already set; nothing started ({state.host_port})", file=err)
    elif not started:
        print(f"already running (backend={state.backend}, {state.host_port}); `stop` first to restart", file=err)
    else:
        ident = f"pid {state.pid}" if state.pid else f"container {(state.container_id or '')[:12]}"
        print(f"started Pub/Sub emulator (backend={state.backend}, {ident}, log {state.log_path})", file=err)
    print(export_line(state.host_port), file=out)
    return 0


def cmd_env(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``env``: print the running emulator's export line; exit 1 if none runs."""
    state = running_state()
    if state is None:
        print("no emulator is running (start one with `python -m crdb_pubsub.emulator start`)", file=err)
        return 1
    print(export_line(state.host_port), file=out)
    return 0


def cmd_stop(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``stop``: stop the recorded emulator; succeeds (exit 0) if none runs."""
    state = stop_detached(grace=args.grace)
    if state is None:
        print("no emulator was running", file=err)
    else:
        print(f"stopped Pub/Sub emulator at {state.host_port} (backend={state.backend})", file=err)
    return 0


def cmd_run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``run``: foreground emulator recorded in the state file until Ctrl-C/SIGTERM or it dies."""
    existing = running_state()
    if existing is not None:
        raise UsageError(f"an emulator is already running at {existing.host_port}; `stop` it first")
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    emu = None
    try:
        emu = start_emulator(port=args.port, backend=args.backend, project=args.project, timeout=args.timeout)
        state = state_from(emu, owner="run")
        if emu.backend != "env":
            write_state(state)
        print(export_line(emu.host_port), file=out, flush=True)
        print(f"Pub/Sub emulator running (backend={emu.backend}); Ctrl-C to stop", file=err, flush=True)
        while not stop_requested.wait(0.5):
            if not emu.is_running():
                print("the emulator exited", file=err)
                return 1
        return 0
    finally:
        if emu is not None:
            emu.stop()
            if emu.backend != "env":
                remove_state(only_if=state)
        for s, h in previous.items():
            signal.signal(s, h)


_COMMANDS = {"start": cmd_start, "env": cmd_env, "stop": cmd_stop, "run": cmd_run}


def dispatch(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the parsed command; map known failures to one-line messages and exit codes."""
    try:
        return _COMMANDS[args.command](args, out, err)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    except (EmulatorUnavailable, EmulatorStartError) as exc:
        print(f"error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``python -m crdb_pubsub.emulator``; returns the exit code."""
    parser = OneLineErrorParser(
        prog="python -m crdb_pubsub.emulator", description="Start, stop and locate the Google Cloud Pub/Sub emulator."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log backend choice and timings")
    configure_parser(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
