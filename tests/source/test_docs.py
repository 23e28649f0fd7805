"""The documentation says what the code and the tests do.

The option and metric tables of the README and the docs/ pages are generated from the code; every
relative link between the pages resolves (file and heading); every test, test file or repository
path a page names exists, so a promise never points at a test that was renamed or removed.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import inspect
import re
from pathlib import Path

import pytest

from crdb_pubsub.decode import decode_messages
from crdb_pubsub.source.datasource import CrdbPubSubDataSource
from crdb_pubsub.source.metrics import METRICS
from crdb_pubsub.source.options import SourceOptions, option_table, parse_options
from crdb_pubsub.tools import readme
from spark_calls import Logs, SparkCalls

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# The pages checked: the README (also the PyPI page), the docs/ pages, the fault suite's own page.
PAGES = [*readme.pages(ROOT), TESTS / "faults" / "README.md"]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _ids(pages):
    return [_rel(p) for p in pages]


def test_the_docs_pages_exist():
    assert (ROOT / "docs" / "README.md").exists(), "docs/README.md (the index of the docs pages) is missing"
    assert len(readme.pages(ROOT)) > 2


@pytest.mark.parametrize("page", readme.pages(ROOT), ids=_ids(readme.pages(ROOT)))
def test_generated_tables_are_the_generated_ones(page):
    text = page.read_text()
    assert readme.rewrite(text) == text, (
        f"{_rel(page)}'s generated tables are stale: run python -m crdb_pubsub.tools.readme {_rel(page)}"
    )


def test_every_generated_table_is_in_one_page_whose_marker_names_it():
    where: dict[str, list[str]] = {name: [] for name in readme.TABLES}
    for page in readme.pages(ROOT):
        text = page.read_text()
        for name in readme.regions(text):
            where[name].append(_rel(page))
            marker = re.search(rf"<!-- generated: {name} [^\n]*-->", text).group(0)
            assert f"python -m crdb_pubsub.tools.readme {_rel(page)}" in marker, (
                f"{_rel(page)}: the {name} marker should name the command that writes this page: {marker}"
            )
    for name, found in where.items():
        assert len(found) == 1, f"the {name} table should be in exactly one page, found in {found or 'none'}"


# --- links -----------------------------------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (links and headings live outside them)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def test_slug_follows_github():
    assert slug("Scaling out: `receiver=executors`") == "scaling-out-receiverexecutors"
    assert slug("From a changefeed to tables in your lake") == "from-a-changefeed-to-tables-in-your-lake"
    assert slug("Spark 4.0/4.1") == "spark-4041"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    assert not broken, f"{_rel(page)} has broken links: {broken}"


def test_every_docs_page_is_linked_from_the_index():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = {t.partition("#")[0] for t in _LINK.findall(index)}
    missing = [p.name for p in readme.pages(ROOT)[1:] if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link to {missing}"


# --- tests and paths the pages name ----------------------------------------------------------------

# tests/x/test_y.py, optionally ::test_z (a glob such as test_a_* is allowed) and a parameter [id]
_TEST_PATH = re.compile(r"(?<![\w/.:-])(tests/[\w/]+\.py)(?:::([\w*]+)(?:\[([\w,.-]+)\])?)?")
# test_y.py without its folder, optionally ::test_z[id]
_TEST_FILE = re.compile(r"(?<![\w/.-])(test_\w+\.py)(?:::([\w*]+)(?:\[([\w,.-]+)\])?)?")
# `test_z` alone, in backticks
_TEST_NAME = re.compile(r"`(test_\w+)`")
# other repository paths (a glob allowed): examples/..., connector/..., emulator/..., tests/<not .py>, .ci/run
_REPO_PATH = re.compile(r"(?<![\w/.:$-])((?:tests|examples|connector|emulator|\.ci)/[\w./*-]*[\w*]/?)")


@functools.cache
def defined_tests(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
    )


@functools.cache
def _test_files_by_name() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in TESTS.rglob("test_*.py"):
        out.setdefault(path.name, []).append(path)
    return out


def _missing_test(files: list[Path], name: str | None, param: str | None) -> str | None:
    """Why ``name[param]`` names no test of ``files`` (None when one of them has it)."""
    if name is None:
        return None
    for path in files:
        matched = fnmatch.filter(defined_tests(path), name)
        if matched and (
            param is None or all(re.search(rf"[\"']{re.escape(p)}[\"']", path.read_text()) for p in param.split(","))
        ):
            return None
    where = ", ".join(_rel(p) for p in files)
    return f"no test {name}{f'[{param}]' if param else ''} in {where}"


def claims(text: str) -> list[str]:
    """What the tests and paths ``text`` names fail to be (empty when all of them exist)."""
    problems = []
    for path, name, param in _TEST_PATH.findall(text):
        file = ROOT / path
        if not file.exists():
            problems.append(f"{path}: no such file")
        elif why := _missing_test([file], name or None, param or None):
            problems.append(f"{path}::{name}: {why}")
    for filename, name, param in _TEST_FILE.findall(text):
        files = _test_files_by_name().get(filename)
        if not files:
            problems.append(f"{filename}: no such test file under tests/")
        elif why := _missing_test(files, name or None, param or None):
            problems.append(f"{filename}::{name}: {why}")
    every = frozenset().union(*(defined_tests(p) for ps in _test_files_by_name().values() for p in ps))
    for name in _TEST_NAME.findall(text):
        if not fnmatch.filter(every, name):
            problems.append(f"`{name}`: no such test under tests/")
    for path in _REPO_PATH.findall(text):
        if path.startswith("tests/") and path.endswith(".py"):
            continue  # checked above, with the test it names
        if not ((ROOT / path).exists() or ("*" in path and any(ROOT.glob(path)))):
            problems.append(f"{path}: no such path")
    return problems


def test_claims_catch_what_does_not_exist():
    assert claims("`tests/source/test_docs.py::test_claims_catch_what_does_not_exist`, `test_smoke.py`") == []
    assert claims("`tests/versions/test_smoke.py::test_failing_sink_then_restart_with_state_dir[frozen]`") == []
    assert claims("`tests/source/state/test_ledger.py::test_a_*`, examples/dataproc/, .ci/run") == []
    assert len(claims("`tests/source/test_docs.py::test_nothing_of_the_kind`")) == 1
    assert len(claims("`tests/versions/test_smoke.py::test_available_now_drain[thawed]`")) == 1
    assert len(claims("`tests/faults/test_gone.py`, `test_gone.py::test_x`, `test_no_such_test`")) == 3
    assert claims("`examples/bench_*.py`") == []
    assert len(claims("examples/bench_nothing.py")) == 1


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_test_and_path_a_page_names_exists(page):
    problems = claims(page.read_text())
    assert not problems, f"{_rel(page)} names what does not exist: {problems}"


# --- the tables say what the code does -------------------------------------------------------------


def test_every_option_is_documented_and_the_datasource_docstring_holds_the_table():
    for name, field in SourceOptions.model_fields.items():
        assert field.description, f"option {name} has no description"
    assert option_table() in CrdbPubSubDataSource.__doc__


def test_decoder_options_are_decode_messages_arguments():
    opts = parse_options({"subscription": "projects/p/subscriptions/orders"})
    params = inspect.signature(decode_messages).parameters
    assert set(opts.decoder_kwargs()) <= set(params)


def test_the_progress_report_holds_exactly_the_documented_metrics(fake, make_reader):
    sub = "projects/p/subscriptions/metrics"
    fake.create_subscription(sub, ack_deadline=10)
    fake.publish(sub, [b'{"after": {"id": 1}}'] * 5)
    calls = SparkCalls(make_reader(sub), Logs(), "4.3")
    calls.start()
    for _ in range(3):
        calls.trigger()
    report = calls.reader.reportLatestOffset()
    assert set(report) <= set(METRICS), f"undocumented metrics: {set(report) - set(METRICS)}"
    always = {name for name, m in METRICS.items() if m.always}
    assert always <= set(report), f"documented but never reported: {always - set(report)}"
