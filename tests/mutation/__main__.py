"""Apply each mutant of the catalogue to a copy of the source and run a tier of the tests against it.

    PYTHONPATH=tests python -m mutation --tier fast            # every mutant
    PYTHONPATH=tests python -m mutation --tier ci --only NAME  # one (a substring of its name)
    PYTHONPATH=tests python -m mutation --check                # each mutant applies (no test run)

A tier is a sequence of stages, each stopped at its first failure: the pinned findings, the
simulation (``fast``: 100 seeds a mode and storage, ``ci``: CI's 500), the unit tests of
``tests/source`` that need neither the emulator nor Spark, and (``ci``) the storages' conformance
tests, the Cloud Storage test server's included. The first stage that fails kills the mutant; for
the simulation, the seed that failed first says how far a world search had to go. Each mutant's
copy of ``connector/`` is imported in place of the installed package (the test processes' path
starts with it), so nothing here touches the checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .catalogue import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("driver", "posix"), ("driver", "gs"), ("executors", "posix"), ("executors", "gs")]
SEEDS = {"fast": 100, "ci": 500}


@dataclass
class Outcome:
    mutant: Mutant
    killed_by: str | None  # the stage, None: it survived
    detail: str
    seconds: float


def apply(mutant: Mutant, into: Path, root: Path = ROOT) -> Path:
    """Write a copy of ``root``'s ``connector/`` with ``mutant`` applied under ``into``; return the import root."""
    package = into / "crdb_pubsub"
    shutil.copytree(root / "connector", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "emulator").symlink_to(root / "emulator")
    target = package / mutant.file
    text = target.read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise LookupError(f"mutant {mutant.name!r}: {count} places in {mutant.file} hold its text")
    target.write_text(text.replace(mutant.old, mutant.new))
    return into


def _run(args: list[str], package: Path, checkout: Path, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join([str(package), str(checkout / "tests")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(args, cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout)


def stages(tier: str, jobs: int, checkout: Path = ROOT) -> list[tuple[str, list[str]]]:
    py = sys.executable
    # The installed package's pytest plugin (the testing kit) would import the copy under test, which an
    # older checkout's copy may not have; the stages use none of its fixtures.
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:crdb_pubsub"]
    # An older checkout's simulation may not know --first: it then runs every seed.
    first = ["--first"] if "--first" in (checkout / "tests/sim/__main__.py").read_text() else []
    out = [("findings", [*pytest, "-x", "tests/sim/test_findings.py"])]
    for mode, storage in PAIRS:
        seeds = f"0:{SEEDS[tier]}"
        sim = [py, "-m", "sim", "--mode", mode, "--storage", storage, "--seeds", seeds, "--jobs", str(jobs), *first]
        out.append((f"simulation {mode}/{storage}", sim))
    unit = [*pytest, "-x", "-m", "not integration", "tests/source"]
    out.append(("unit tests", [*unit, "-n", str(jobs)] if jobs > 1 else unit))
    if tier == "ci":
        out.append(("storage conformance", [*pytest, "-x", "tests/source/storage"]))
    return out


def run(mutant: Mutant, tier: str, jobs: int, checkout: Path = ROOT) -> Outcome:
    """Run ``tier`` of ``checkout``'s tests against its source with ``mutant`` applied."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        package = apply(mutant, Path(tmp), checkout)
        for name, args in stages(tier, jobs, checkout):
            done = _run(args, package, checkout, timeout=3600)
            if done.returncode != 0:
                return Outcome(mutant, name, _detail(name, done), time.perf_counter() - t0)
    return Outcome(mutant, None, "", time.perf_counter() - t0)


def _detail(stage: str, done: subprocess.CompletedProcess) -> str:
    if stage.startswith("simulation"):
        m = re.search(r"^seed (\d+): (.*)$", done.stdout, re.M)
        return f"seed {m.group(1)}: {m.group(2)[:120]}" if m else (done.stdout + done.stderr)[-200:]
    m = re.search(r"^FAILED (\S+)", done.stdout, re.M)
    return m.group(1) if m else (done.stdout + done.stderr).strip().splitlines()[-1][:200]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mutation")
    p.add_argument("--tier", choices=["fast", "ci"], default="fast")
    p.add_argument("--only", help="the mutants whose name holds this text (several texts: separated by |)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--check", action="store_true", help="only check that every mutant applies")
    p.add_argument(
        "--checkout",
        type=Path,
        default=ROOT,
        help="another checkout whose source and tests to use (e.g. an older commit's worktree); a mutant its "
        "source lacks the text of is skipped",
    )
    args = p.parse_args(argv)
    texts = args.only.split("|") if args.only else []
    mutants = [m for m in MUTANTS if not texts or any(t in m.name for t in texts)]
    if args.checkout != ROOT:
        here = [m for m in mutants if (args.checkout / "connector" / m.file).exists()]
        here = [m for m in here if (args.checkout / "connector" / m.file).read_text().count(m.old) == 1]
        for m in mutants:
            if m not in here:
                print(f"     -    {m.name}  [{m.file}]  n/a (not in {args.checkout})")
        mutants = here
    if args.check:
        for m in mutants:
            with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
                apply(m, Path(tmp), args.checkout)
        print(f"{len(mutants)} mutants apply")
        return 0
    # Every stage must pass on the source unchanged, or a mutant "killed" proves nothing.
    base = run(Mutant("none", mutants[0].file, mutants[0].old, mutants[0].old, ""), args.tier, args.jobs, args.checkout)
    if base.killed_by:
        print(f"the source unchanged fails {base.killed_by}: {base.detail}")
        return 2
    print(f"{base.seconds:6.0f} s  the source unchanged passes every stage", flush=True)
    outcomes = []
    for m in mutants:
        o = run(m, args.tier, args.jobs, args.checkout)
        outcomes.append(o)
        verdict = f"killed by {o.killed_by}: {o.detail}" if o.killed_by else "SURVIVED"
        if not o.killed_by and m.equivalent:
            verdict = f"survived, equivalent: {m.equivalent}"
        print(f"{o.seconds:6.0f} s  {m.name}  [{m.file}]  {verdict}", flush=True)
    killed = sum(o.killed_by is not None for o in outcomes)
    equivalent = sum(o.killed_by is None and bool(o.mutant.equivalent) for o in outcomes)
    print(
        f"{killed} of {len(outcomes)} mutants killed by the {args.tier} tier ({100 * killed / len(outcomes):.0f} %); "
        f"{equivalent} survivor(s) shown equivalent"
    )
    return 0 if killed + equivalent == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
