"""The Dataproc guide runs as written: every ``gcloud`` command of examples/dataproc/README.md,
docs/dataproc.md and docs/producer.md is one gcloud has, with flags Google documents for it.

No command is run (no project, no credentials here): each is parsed and checked against
:data:`FLAGS`, a table of the flags each command's reference page lists (the URL beside it; the
flags every command takes are :data:`GLOBAL_FLAGS`). Also: a ``--properties`` value holding commas
uses gcloud's custom delimiter (``^#^``, ``gcloud topic escaping``), the image and runtime versions
are the guide's Versions table's, ``gsutil`` appears nowhere, and the files and the package the
commands name exist in the repository and the wheel's metadata.
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest

import crdb_pubsub

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "examples" / "dataproc" / "README.md"
PAGES = [GUIDE, ROOT / "docs" / "dataproc.md", ROOT / "docs" / "producer.md"]
REF = "https://cloud.google.com/sdk/gcloud/reference/"

# gcloud's global flags (https://cloud.google.com/sdk/gcloud/reference, "GCLOUD WIDE FLAGS").
GLOBAL_FLAGS = {
    "--account", "--billing-project", "--configuration", "--flags-file", "--flatten", "--format",
    "--help", "--impersonate-service-account", "--log-http", "--project", "--quiet", "--trace-token",
    "--user-output-enabled", "--verbosity",
}  # fmt: skip

_IAM_BINDING = {"--member", "--role", "--condition", "--condition-from-file"}

# command -> (reference page, the flags it documents besides the global ones).
FLAGS: dict[str, tuple[str, set[str]]] = {
    "services enable": (REF + "services/enable", {"--async"}),
    "iam service-accounts create": (REF + "iam/service-accounts/create", {"--description", "--display-name"}),
    "iam service-accounts add-iam-policy-binding": (REF + "iam/service-accounts/add-iam-policy-binding", _IAM_BINDING),
    "iam roles create": (
        REF + "iam/roles/create",
        {"--organization", "--project", "--description", "--file", "--permissions", "--stage", "--title"},
    ),
    "projects add-iam-policy-binding": (REF + "projects/add-iam-policy-binding", _IAM_BINDING),
    "pubsub subscriptions add-iam-policy-binding": (REF + "pubsub/subscriptions/add-iam-policy-binding", _IAM_BINDING),
    "pubsub topics add-iam-policy-binding": (REF + "pubsub/topics/add-iam-policy-binding", _IAM_BINDING),
    "pubsub topics create": (
        REF + "pubsub/topics/create",
        {"--labels", "--message-retention-duration", "--message-storage-policy-allowed-regions", "--kms-key"},
    ),
    "pubsub subscriptions create": (
        REF + "pubsub/subscriptions/create",
        {
            "--topic",
            "--topic-project",
            "--ack-deadline",
            "--enable-exactly-once-delivery",
            "--enable-message-ordering",
            "--expiration-period",
            "--labels",
            "--message-filter",
            "--message-retention-duration",
            "--retain-acked-messages",
            "--dead-letter-topic",
            "--dead-letter-topic-project",
            "--max-delivery-attempts",
            "--min-retry-delay",
            "--max-retry-delay",
        },
    ),
    "storage buckets add-iam-policy-binding": (REF + "storage/buckets/add-iam-policy-binding", _IAM_BINDING),
    "storage cp": (
        REF + "storage/cp",
        {"--recursive", "--no-clobber", "--content-type", "--cache-control", "--if-generation-match"},
    ),
    "artifacts repositories create": (
        REF + "artifacts/repositories/create",
        {"--location", "--repository-format", "--description", "--kms-key", "--labels", "--async"},
    ),
    "builds submit": (
        REF + "builds/submit",
        {"--tag", "--region", "--config", "--substitutions", "--timeout", "--machine-type", "--async"},
    ),
    "dataproc clusters create": (
        REF + "dataproc/clusters/create",
        {
            "--region",
            "--zone",
            "--image-version",
            "--image",
            "--service-account",
            "--scopes",
            "--num-workers",
            "--master-machine-type",
            "--worker-machine-type",
            "--num-secondary-workers",
            "--initialization-actions",
            "--initialization-action-timeout",
            "--metadata",
            "--properties",
            "--optional-components",
            "--enable-component-gateway",
            "--bucket",
            "--temp-bucket",
            "--subnet",
            "--network",
            "--no-address",
            "--tags",
            "--labels",
            "--max-idle",
            "--master-boot-disk-size",
            "--worker-boot-disk-size",
            "--async",
        },
    ),
    "dataproc jobs submit pyspark": (
        REF + "dataproc/jobs/submit/pyspark",
        {
            "--cluster",
            "--region",
            "--py-files",
            "--files",
            "--jars",
            "--archives",
            "--properties",
            "--properties-file",
            "--driver-log-levels",
            "--labels",
            "--max-failures-per-hour",
            "--max-failures-total",
            "--async",
            "--id",
            "--bucket",
            "--cluster-labels",
            "--driver-required-memory-mb",
            "--driver-required-vcores",
            "--ttl",
        },
    ),
    "dataproc batches submit pyspark": (
        REF + "dataproc/batches/submit/pyspark",
        {
            "--archives",
            "--async",
            "--batch",
            "--container-image",
            "--deps-bucket",
            "--files",
            "--history-server-cluster",
            "--jars",
            "--kms-key",
            "--labels",
            "--metastore-service",
            "--properties",
            "--py-files",
            "--region",
            "--request-id",
            "--service-account",
            "--staging-bucket",
            "--tags",
            "--ttl",
            "--user-workload-authentication-type",
            "--version",
            "--network",
            "--subnet",
        },
    ),
}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_GCLOUD = re.compile(r"(?:^|;|&&|\bdo\b)\s*(gcloud\s.*?)\s*(?:;\s*done\s*)?$")


def _commands(page: Path) -> list[str]:
    """Every ``gcloud`` command of the page's shell blocks, continuation lines joined."""
    out = []
    for lang, body in _FENCE.findall(page.read_text()):
        if lang not in ("bash", "sh", "shell", ""):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip()
            m = _GCLOUD.search(line)
            if m:
                out.append(m.group(1))
    return out


def _all_commands() -> list[tuple[str, str]]:
    return [(p.relative_to(ROOT).as_posix(), c) for p in PAGES for c in _commands(p)]


def _parse(command: str) -> tuple[str, list[str], list[str]]:
    """(the command's group and name, its gcloud flags as given, its positional arguments)."""
    words = shlex.split(command)
    assert words[0] == "gcloud"
    if "--" in words:
        words = words[: words.index("--")]  # what follows goes to the job
    name = max((k for k in FLAGS if words[1 : 1 + len(k.split())] == k.split()), key=len, default=None)
    assert name is not None, f"not a command the guide's table knows: {command[:120]}"
    rest = words[1 + len(name.split()) :]
    return name, [w for w in rest if w.startswith("--")], [w for w in rest if not w.startswith("-")]


def _versions() -> dict[str, str]:
    """The guide's Versions table: ``{"image": "3.0", "runtime": "3.0"}``."""
    text = GUIDE.read_text()
    section = text[text.index("## Versions") :]
    found = dict(re.findall(r"\|\s*(image|runtime) `([\w.-]+)`", section))
    assert set(found) == {"image", "runtime"}, found
    return found


def _settings() -> dict[str, str]:
    text = GUIDE.read_text()
    return {k: v.strip('"') for k, v in re.findall(r"^export (\w+)=(\S+)", text, re.M)}


def test_the_guide_has_the_commands_a_user_needs():
    names = {_parse(c)[0] for _, c in _all_commands()}
    assert {"dataproc clusters create", "dataproc jobs submit pyspark", "dataproc batches submit pyspark"} <= names
    assert {"storage buckets add-iam-policy-binding", "pubsub subscriptions add-iam-policy-binding"} <= names


@pytest.mark.parametrize(("page", "command"), _all_commands(), ids=lambda v: v if v.endswith(".md") else v[:60])
def test_each_gcloud_command_uses_documented_flags(page, command):
    name, flags, _ = _parse(command)
    url, documented = FLAGS[name]
    unknown = sorted({f.split("=")[0] for f in flags} - documented - GLOBAL_FLAGS)
    assert unknown == [], f"{page}: gcloud {name} has no {unknown} ({url})"
    for flag in flags:
        key, _, value = flag.partition("=")
        if key in ("--properties", "--metadata") and "," in value:
            assert re.match(r"\^[^\w\s]\^", value), f"{page}: {key} value with commas needs ^#^ (gcloud topic escaping)"


def test_versions_match_the_versions_table():
    want = _versions()
    seen = 0
    for _, command in _all_commands():
        name, flags, _ = _parse(command)
        values = dict(f.partition("=")[::2] for f in flags)
        if name == "dataproc clusters create":
            assert values.get("--image-version") == want["image"], command
            seen += 1
        if name == "dataproc batches submit pyspark":
            assert values.get("--version") == want["runtime"], command
            seen += 1
    assert seen >= 2


def test_a_streaming_job_is_restarted_and_a_batch_outlives_four_hours():
    for _, command in _all_commands():
        name, flags, _ = _parse(command)
        keys = {f.split("=")[0] for f in flags}
        if name == "dataproc jobs submit pyspark":
            assert {"--max-failures-per-hour", "--max-failures-total"} <= keys, command
        if name == "dataproc batches submit pyspark":
            # runtime 3.0 runs with end-user credentials unless told; 2.1+ batches stop after 4 h.
            assert {"--ttl", "--service-account", "--user-workload-authentication-type"} <= keys, command


def test_no_gsutil():
    """Cloud Storage through ``gcloud storage``: no ``gsutil`` command in any block."""
    for page in PAGES:
        for _, body in _FENCE.findall(page.read_text()):
            assert not re.search(r"(?m)(^|[;&|]\s*|\bdo\s+)gsutil\b", body), page


def test_the_files_and_the_package_named_exist():
    settings = _settings()
    assert settings["VERSION"] == crdb_pubsub.__version__
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = {k.strip() for k in cfg["options.extras_require"]}
    for _, command in _all_commands():
        name, flags, args = _parse(command)
        if name == "storage cp":
            for src in args[:-1]:
                # The wheelhouse is the build script's default output; everything else is in the clone.
                assert src == "dist/wheelhouse" or (ROOT / src).is_file(), src
        for flag in flags:
            for path in re.findall(r"gs://\$BUCKET/cdc/code/([\w.$-]+)", flag) + [
                a.rsplit("/", 1)[-1] for a in args if a.startswith("gs://$BUCKET/cdc/code/")
            ]:
                assert (ROOT / "examples" / "dataproc" / path).is_file(), path
    build = (ROOT / "examples/dataproc/build-wheelhouse.sh").read_text()
    assert '"${1:-$ROOT/dist/wheelhouse}"' in build and '"$wheel[apply]"' in build
    for text in (
        (ROOT / "examples/dataproc/Dockerfile").read_text(),
        (ROOT / "examples/dataproc/install-crdb-pubsub.sh").read_text(),
    ):
        # From the wheelhouse alone: no index, on the cluster or in the container.
        assert re.search(r"pip install [^\n]*--no-index --find-links [^\n]*'crdb-pubsub\[apply\]'", text), text[:200]
        for extra in re.findall(r"'crdb-pubsub\[(\w+)\]'", text):
            assert extra in extras, extra
    assert "apply" in extras  # deltalake, which the job's apply needs


def test_the_wheelhouse_the_cluster_installs_is_the_one_the_guide_uploads():
    """The metadata key the cluster is created with is the one the initialization action reads,
    and it names the folder step 2 copies the wheelhouse to."""
    script = (ROOT / "examples/dataproc/install-crdb-pubsub.sh").read_text()
    (key,) = set(re.findall(r"metadata (crdb-pubsub-wheelhouse)", script))
    uploads = [c for _, c in _all_commands() if c.startswith("gcloud storage cp --recursive dist/wheelhouse")]
    (upload,) = uploads
    folder = shlex.split(upload)[-1].rstrip("/") + "/wheelhouse"
    creates = [c for _, c in _all_commands() if _parse(c)[0] == "dataproc clusters create"]
    assert creates and all(f"--metadata={key}={folder}" in c.replace('"', "") for c in creates), creates
