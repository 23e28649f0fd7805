"""Run or replay simulated worlds.

    PYTHONHASHSEED=0 PYTHONPATH=tests python -m sim --mode executors --storage gs --seed 17 [-v]
    PYTHONHASHSEED=0 PYTHONPATH=tests python -m sim --mode driver --storage posix --seeds 0:1000

One seed prints its scenario, its verdict and (``-v``) the source's last log lines; a range prints
one line per failing seed and a summary (seeds per minute). ``--jobs N`` runs a range in N processes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def replay_command(mode: str, storage: str, seed: int) -> str:
    return f"PYTHONHASHSEED=0 PYTHONPATH=tests python -m sim --mode {mode} --storage {storage} --seed {seed} -v"


def run_one(mode: str, storage: str, seed: int, paths: bool = False) -> tuple[int, list[str], float, int, set[str]]:
    """One world: its seed, the checker's problems, real seconds, switches, and (``paths``) the rare paths it ran."""
    import contextlib

    from .checker import check
    from .paths import resolve, traced
    from .world import simulate

    t0 = time.perf_counter()
    with traced(resolve()) if paths else contextlib.nullcontext(set()) as ran:
        rec = simulate(seed, mode, storage)
    verdict = check(rec)
    return seed, verdict.problems, time.perf_counter() - t0, rec.switches, set(ran)


def digest(rec: object) -> str:
    """What a world did, in a line: the sink, the acknowledgements, the clock and the scheduling."""
    import hashlib
    import json

    sink = rec.sink
    service = rec.service
    acks = [(e.mid, round(e.at, 6)) for e in service.acks]
    data = json.dumps([sink.batches, acks, round(rec.end_time, 6), rec.switches], sort_keys=True)
    return hashlib.sha1(data.encode()).hexdigest()[:16]


def _twice(mode: str, storage: str, seeds: range) -> int:
    from .world import simulate

    first = {s: digest(simulate(s, mode, storage)) for s in seeds}
    differ = [s for s in reversed(seeds) if digest(simulate(s, mode, storage)) != first[s]]
    for s in differ:
        print(f"seed {s} did not replay the same world: {replay_command(mode, storage, s)}")
    print(f"{len(seeds)} seeds run twice, {len(differ)} differed")
    return 1 if differ else 0


def _range(spec: str) -> range:
    a, _, b = spec.partition(":")
    return range(int(a), int(b))


def _sweep(
    mode: str, storage: str, seeds: range, paths: bool = False
) -> list[tuple[int, list[str], float, int, set[str]]]:
    return [run_one(mode, storage, s, paths) for s in seeds]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim")
    p.add_argument("--mode", choices=["driver", "executors"])
    p.add_argument("--storage", choices=["posix", "gs"])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seed", type=int)
    g.add_argument("--seeds", help="a range A:B")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--watch", default="", help="message ids (comma-separated) whose story to print")
    p.add_argument("--twice", action="store_true", help="run each seed of --seeds twice and compare the two worlds")
    p.add_argument("--finding", help="run one pinned finding (tests/sim/findings.py) instead of a drawn world")
    p.add_argument(
        "--paths",
        action="store_true",
        help="with --seeds: count the worlds that ran each rare path (tests/sim/paths.py)",
    )
    p.add_argument("--first", action="store_true", help="with --seeds: stop at the first failing seed (in order)")
    args = p.parse_args(argv)
    if not args.finding and (args.mode is None or args.storage is None or (args.seed is None and args.seeds is None)):
        p.error("--mode, --storage and --seed or --seeds are required (or --finding NAME)")
    if os.environ.get("PYTHONHASHSEED") != "0":
        print("note: PYTHONHASHSEED is not 0; a seed replays exactly only with the same hash seed", file=sys.stderr)
    if args.twice:
        return _twice(args.mode, args.storage, _range(args.seeds))
    if args.seed is not None or args.finding:
        from .checker import check
        from .findings import FINDINGS
        from .world import simulate

        t0 = time.perf_counter()
        scenario = FINDINGS[args.finding]() if args.finding else None
        if scenario is not None:
            args.seed, args.mode, args.storage = scenario.seed, scenario.mode, scenario.storage
        rec = simulate(
            args.seed, args.mode, args.storage, scenario=scenario, watch=set(filter(None, args.watch.split(",")))
        )
        verdict = check(rec)
        print(rec.scenario.describe())
        print(
            f"virtual {rec.end_time:.1f} s, {rec.switches} switches, {time.perf_counter() - t0:.2f} s real; "
            f"sink {len(rec.sink.ids())} rows in {len(rec.sink.batches)} batches; apps {rec.apps}; "
            f"failures {[f'{type(e).__name__}: {e}' for e in rec.failures]}"
        )
        if args.verbose:
            print("\n".join(rec.log_tail))
        if rec.story:
            print("\n".join(rec.story))
        print("OK" if verdict else "FAILED:\n  " + "\n  ".join(verdict.problems))
        return 0 if verdict else 1
    seeds = _range(args.seeds)
    t0 = time.perf_counter()
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        step = 5 if args.first else 25
        chunks = [range(s, min(s + step, seeds.stop)) for s in range(seeds.start, seeds.stop, step)]
        results = []
        pool = ProcessPoolExecutor(args.jobs)
        try:
            futures = [pool.submit(_sweep, args.mode, args.storage, c, args.paths) for c in chunks]
            for f in futures:  # in order: with --first, the seeds before the first failure all ran
                part = f.result()
                results.extend(part)
                if args.first and any(r[1] for r in part):
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    elif args.first:
        results = []
        for s in seeds:
            results.append(run_one(args.mode, args.storage, s, args.paths))
            if results[-1][1]:
                break
    else:
        results = _sweep(args.mode, args.storage, seeds, args.paths)
    failed = [(s, probs) for s, probs, _, _, _ in results if probs]
    for s, probs in failed:
        print(f"seed {s}: {probs[0]}" + (f" (+{len(probs) - 1} more)" if len(probs) > 1 else ""))
        print(f"    replay: {replay_command(args.mode, args.storage, s)}")
    took = time.perf_counter() - t0
    if args.paths:
        from .paths import PATHS

        for path in PATHS:
            if args.mode not in path.modes:
                continue
            n = sum(path.name in r[4] for r in results)
            print(f"{n:6d} {100 * n / len(results):5.1f} %  {path.name}")
    slowest = sorted(results, key=lambda r: -r[2])[:3]
    print(
        f"{len(results)} seeds, {len(failed)} failed, {took:.1f} s ({len(results) / took * 60:.0f} seeds/min); "
        f"slowest {[(s, round(t, 2), n) for s, _, t, n, _ in slowest]}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
