"""Options of the ``crdb_pubsub`` source: parsed, validated and normalised once, up front.

Spark hands a data source its options as strings with the user's spelling of the keys. Everything
is checked here, when ``load()`` builds the source, so a typo or an absurd value fails before a
query starts, naming the option, the bad value and what would have been accepted. Credentials are
kept as ``SecretStr`` so that neither ``repr`` nor an error message can leak them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from ..decode.schema import COLUMN_NAMES, output_columns
from ..decode.vocabulary import ENVELOPES, MODES
from .storage import check_state_dir

_SUBSCRIPTION_PATH = re.compile(r"^projects/(?P<project>[^/]+)/subscriptions/(?P<sub>[^/]+)$")
_TOPIC_PATH = re.compile(r"^projects/(?P<project>[^/]+)/topics/(?P<topic>[^/]+)$")
# Pub/Sub resource ids: 3-255 chars, start with a letter, then letters, digits and -_.~+%
_RESOURCE_ID = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")
_PROJECT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-.:]{0,62}[A-Za-z0-9]$|^[A-Za-z0-9]$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9\-.]+):(\d{1,5})$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)

# The real service accepts ack deadlines of 10-600 s; the emulator also accepts shorter ones,
# which the tests use to make redelivery observable in seconds.
REAL_MIN_ACK_DEADLINE = 10
EMULATOR_MIN_ACK_DEADLINE = 1
MAX_ACK_DEADLINE = 600


class OptionError(ValueError):
    """A source option is missing, unknown or has a value that is not accepted."""


class SourceOptions(BaseModel):
    """The validated options of one ``readStream.format("crdb_pubsub")`` source.

    Field names are the documented option names (case-insensitive on input).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, hide_input_in_errors=True)

    # Each option's row in the README's table (and in the DataSource's docstring) is generated from
    # its Field: ``description`` is the meaning, ``shown_default`` the default as a reader wants it;
    # ``decode_as`` names the ``decode_messages`` argument the option is passed as.
    subscription: str = Field(
        description="`projects/P/subscriptions/S`, or an id with `projectId`; a comma-separated list reads several "
        "subscriptions in one query",
        json_schema_extra={"shown_default": "required"},
    )
    projectId: str | None = Field(None, description="project for bare subscription/topic ids")
    topic: str | None = Field(
        None,
        description="create the subscription on this topic if it does not exist (one topic per subscription in a list)",
    )
    filter: str | None = Field(
        None,
        description="Pub/Sub's subscription filter for a subscription the source creates on `topic` (filters "
        "are immutable: an existing subscription with another filter is refused). For a `topic_name=` changefeed "
        "(every table on one topic, `with_table_name_attribute=true`), one table plus the resolved messages, which "
        'carry no attributes: `attributes.TABLE_NAME = "users" OR NOT attributes:TABLE_NAME`. The emulator stores '
        "filters but does not apply them.",
    )
    deadLetterTopic: str | None = Field(
        None,
        description="topic (`projects/P/topics/T`, or an id with `projectId`) where bodies that can't be "
        "decoded are published, unchanged, with attributes `crdb_pubsub_error`, `crdb_pubsub_subscription` (the "
        "query's subscriptions) and `crdb_pubsub_message_id`. The executors publish them before their batch can "
        "commit, so a message is acknowledged only after the publish was confirmed and its batch committed; a "
        "retried task may publish a body again (tell copies apart by `crdb_pubsub_message_id`). In `PERMISSIVE` "
        "they also stay `malformed` rows, in `DROPMALFORMED` they don't; not with `FAILFAST`.",
    )
    emulatorHost: str | None = Field(
        None,
        description="`host:port` of a Pub/Sub emulator (plaintext, no credentials)",
        json_schema_extra={"shown_default": "`PUBSUB_EMULATOR_HOST`"},
    )
    endpoint: str | None = Field(
        None,
        description="`host:port` of a regional or Private Service Connect endpoint (TLS, with credentials), "
        "e.g. `us-east1-pubsub.googleapis.com:443`; not with `emulatorHost`",
        json_schema_extra={"shown_default": "the global endpoint"},
    )
    credentialsFile: SecretStr | None = Field(
        None,
        description="a service-account (or other google-auth) key file; readable where the reader runs",
        json_schema_extra={"shown_default": "Application Default Credentials"},
    )
    credentialsJson: SecretStr | None = Field(
        None,
        description="the JSON content of such a key; not with `credentialsFile`",
        json_schema_extra={"shown_default": "Application Default Credentials"},
    )
    envelope: Literal[ENVELOPES] = Field(  # type: ignore[valid-type]
        "auto",
        description="force one envelope: " + ", ".join(f"`{e}`" for e in ENVELOPES),
        json_schema_extra={"decode_as": "envelope"},
    )
    mode: Literal[MODES] = Field(  # type: ignore[valid-type]
        "PERMISSIVE",
        description="`PERMISSIVE` (bad messages become `kind=malformed` rows), `DROPMALFORMED` "
        "(dropped and counted), `FAILFAST` (the batch fails naming the message id)",
        json_schema_extra={"decode_as": "mode"},
    )
    rowSchema: str | None = Field(
        None,
        description='Spark DDL (`"id STRING, price DECIMAL(10,2), qty BIGINT"`): `before`/`after` become '
        "typed structs; exact decimals and BIGINTs; values that don't fit make the row malformed",
        json_schema_extra={"decode_as": "row_schema"},
    )
    includeRaw: bool = Field(
        False,
        description="keep the raw body in `data` on every row (always kept on malformed rows)",
        json_schema_extra={"decode_as": "include_raw"},
    )
    includeResolved: bool = Field(True, description="emit `resolved`/`watermark` rows")
    columns: str | None = Field(
        None,
        description="the output columns, comma-separated, in the order wanted (e.g. "
        "`kind,table_name,key,after,mvcc_timestamp,error`): only these are built on the executors and shipped to "
        "Spark, which does not prune a Python source's columns itself (what it saves: Performance). With "
        "`mode=PERMISSIVE` it must name `error` (a malformed message's row says why there), with `includeRaw=true` "
        "`data`",
        json_schema_extra={"shown_default": "all 19"},
    )
    maxMessagesPerTrigger: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="at most this many messages per micro-batch",
        json_schema_extra={"shown_default": "unlimited"},
    )
    maxBytesPerTrigger: int | None = Field(
        None,
        ge=1024,
        le=1 << 40,
        description="at most this many body bytes per micro-batch (`64MB`, `1GiB` accepted)",
        json_schema_extra={"shown_default": "unlimited"},
    )
    numPartitions: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Spark partitions (executor tasks) per micro-batch; with "
        "`receiver=executors`, the parallel pullers (set it to the executors' cores)",
        json_schema_extra={
            "shown_default": "1 per 50,000 messages or 32 MiB, up to 8; executors: 2, or 1 per subscription"
        },
    )
    maxOutstandingMessages: int = Field(
        # Spark's cost per micro-batch (~0.4 s of checkpoint writes, planning and task launch on
        # two cores) wants batches of tens of thousands of messages, and a batch takes half of it.
        200_000,
        ge=1,
        le=10_000_000,
        description="flow control: messages held (buffered or in an unacknowledged batch); pulling pauses at the "
        "bound; with `receiver=driver` a batch takes at most half, so that the next one is pulled meanwhile",
    )
    maxOutstandingBytes: int = Field(
        256 * 1024 * 1024,
        ge=64 * 1024,
        le=1 << 40,
        description="the same bound in body bytes",
        json_schema_extra={"shown_default": "256 MiB"},
    )
    ackDeadlineSeconds: int = Field(
        60,
        ge=EMULATOR_MIN_ACK_DEADLINE,
        le=MAX_ACK_DEADLINE,
        description="lease length requested for held messages (10-600; 1-600 against the emulator)",
    )
    maxLeaseDurationSeconds: int = Field(
        3600,
        ge=1,
        le=7 * 24 * 3600,
        description="stop extending a message's lease after this long (it is then redelivered)",
    )
    stateDir: str | None = Field(
        None,
        description="where the query keeps its state for exactly-once replay (see Guarantees), one per query: "
        "`gs://bucket/prefix` (Cloud Storage, as on Dataproc), or an absolute path (a local disk, or a mount every "
        "node reaches; a relative one is refused). With `receiver=executors` it is required and must be reached by the driver and every executor: "
        "`gs://` or a shared mount (see Scaling out)",
    )
    receiver: Literal["driver", "executors"] = Field(
        "driver",
        description="who pulls: `driver` (one receiver in the driver-side reader, which hands each batch to the "
        "executors) or `executors` (each task pulls its share, records it in `stateDir`, then decodes it; the driver "
        "only leases and acknowledges: see Scaling out)",
    )
    batchTransfer: Literal["fetch", "tasks"] = Field(
        "fetch",
        description="with `receiver=driver`, how a batch reaches the executors: `fetch` (each task fetches its "
        "partition from the driver-side reader over TCP, encrypted with a key that travels inside Spark's task, so "
        "as private as Spark's own channel; the executors must reach the driver's host) or `tasks` (inside Spark's "
        "tasks, through the JVM: no connection of its own, about 8 us more CPU per message); refused with "
        "`receiver=executors`, whose tasks pull themselves",
    )

    # ---- field-level checks -------------------------------------------------------------------

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("receiver", "batchTransfer", mode="before")
    @classmethod
    def _receiver_lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @field_validator("envelope", mode="before")
    @classmethod
    def _envelope_lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @field_validator("maxBytesPerTrigger", "maxOutstandingBytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if isinstance(v, str):
            m = _SIZE.match(v)
            if not m:
                raise ValueError("expected a byte count such as 1048576, 64MB or 1GiB")
            unit = (m.group(2) or "").lower()
            if unit in ("", "b"):
                return int(m.group(1))
            base = 1024 if "i" in unit else 1000
            return int(m.group(1)) * base ** ("kmgt".index(unit[0]) + 1)
        return v

    @field_validator("columns")
    @classmethod
    def _columns(cls, v: str | None) -> str | None:
        if v is None:
            return v
        return ",".join(output_columns(v.split(",")))

    @field_validator("emulatorHost", "endpoint")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _HOST_PORT.match(v.strip())
        if not m or not (0 < int(m.group(2)) < 65536):
            raise ValueError("expected host:port, e.g. 127.0.0.1:8085")
        return v.strip()

    @field_validator("projectId")
    @classmethod
    def _project(cls, v: str | None) -> str | None:
        if v is not None and not _PROJECT_ID.match(v):
            raise ValueError("expected a GCP project id such as my-project")
        return v

    @field_validator("stateDir")
    @classmethod
    def _state_dir(cls, v: str | None) -> str | None:
        # The storage layer's rule (one for the option and for opening it). A URL it can't serve
        # must not silently become a local directory named after its scheme, nor a relative path
        # another directory on every node.
        if v is None:
            return v
        check_state_dir(v)
        return v

    @field_validator("credentialsJson")
    @classmethod
    def _credentials_json(cls, v: SecretStr | None) -> SecretStr | None:
        # Checked here so that a pasted path or a truncated key fails at load(), not in the stream;
        # the message never quotes the value (nor does the JSON parser's, which is dropped).
        if v is None:
            return v
        try:
            info = json.loads(v.get_secret_value())
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise ValueError(
                "not a JSON object: give the content of a service-account key file (or credentialsFile with its path)"
            )
        return v

    @field_validator("rowSchema")
    @classmethod
    def _row_schema(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            from ..decode.ddl import parse_ddl  # the decoder's DDL parser: one grammar for both
        except ImportError:  # pragma: no cover - decoder not installed yet
            return v
        parse_ddl(v)
        return v

    # ---- cross-field checks -------------------------------------------------------------------

    @model_validator(mode="after")
    def _consistent(self) -> SourceOptions:
        if self.credentialsFile is not None and self.credentialsJson is not None:
            raise ValueError("credentialsFile and credentialsJson are mutually exclusive: give one")
        if self.deadLetterTopic is not None:
            if self.mode == "FAILFAST":
                raise ValueError(
                    "deadLetterTopic needs mode PERMISSIVE or DROPMALFORMED: FAILFAST stops at the first "
                    "malformed message instead"
                )
            self.dead_letter_topic_path  # noqa: B018 - raises on a malformed topic
        if self.filter is not None and not self.topic:
            raise ValueError("filter applies to subscriptions the source creates: set topic too")
        if self.endpoint and self.emulatorHost:
            raise ValueError(
                "endpoint (TLS, with credentials) and emulatorHost (plaintext) are mutually exclusive: give one"
            )
        paths = self.subscription_paths  # raises on malformed entries
        topics = self.topic_paths
        if topics and len(topics) != len(paths):
            raise ValueError(
                f"topic names {len(topics)} topic(s) for {len(paths)} subscription(s): give one topic per subscription"
            )
        min_deadline = EMULATOR_MIN_ACK_DEADLINE if self.effective_emulator_host else REAL_MIN_ACK_DEADLINE
        if self.ackDeadlineSeconds < min_deadline:
            raise ValueError(
                f"ackDeadlineSeconds={self.ackDeadlineSeconds} is below Pub/Sub's minimum of {min_deadline} s "
                f"(accepted: {min_deadline}-{MAX_ACK_DEADLINE}; below 10 only against the emulator)"
            )
        if self.maxLeaseDurationSeconds < self.ackDeadlineSeconds:
            raise ValueError(
                f"maxLeaseDurationSeconds={self.maxLeaseDurationSeconds} must be >= ackDeadlineSeconds={self.ackDeadlineSeconds}"
            )
        if self.receiver == "executors" and not self.stateDir:
            raise ValueError(
                "receiver=executors needs stateDir: each task records the slice it pulled there before "
                "yielding a row, and the driver acknowledges from those records (a directory the driver "
                "and every executor reach)"
            )
        if self.receiver == "executors" and "batchTransfer" in self.model_fields_set:
            raise ValueError(
                f"batchTransfer={self.batchTransfer} applies to receiver=driver (how the driver hands a batch to "
                "the tasks); with receiver=executors the tasks pull themselves: remove batchTransfer"
            )
        if self.columns is not None:
            named = self.output_columns
            if self.mode == "PERMISSIVE" and "error" not in named:
                raise ValueError(
                    "option 'columns' leaves out error, which mode=PERMISSIVE needs: a message that can't be decoded "
                    "becomes a row whose only account of it is error (its kind is malformed). Add error, or set "
                    "mode=DROPMALFORMED (dropped and counted; with deadLetterTopic, published there) or FAILFAST"
                )
            if self.includeRaw and "data" not in named:
                raise ValueError(
                    "option 'columns' leaves out data, which includeRaw=true fills: add data, or drop includeRaw"
                )
        if self.envelope == "csv" and not self.rowSchema:
            raise ValueError("envelope=csv needs rowSchema: CSV lines carry no column names")
        return self

    # ---- derived values -----------------------------------------------------------------------

    @property
    def effective_emulator_host(self) -> str | None:
        """``emulatorHost``, else ``PUBSUB_EMULATOR_HOST`` (read when the options are built)."""
        return self.emulatorHost or os.environ.get("PUBSUB_EMULATOR_HOST") or None

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The DataFrame's columns, in order: those ``columns`` names, else all of them."""
        return COLUMN_NAMES if self.columns is None else tuple(self.columns.split(","))

    @property
    def decode_columns(self) -> tuple[str, ...]:
        """What the executors decode: the output columns, then those the source itself reads after.

        ``kind`` to leave out the progress rows (``includeResolved=false``) and the malformed ones
        (``DROPMALFORMED`` with a dead-letter topic); the dead letters' body, id and reason.
        """
        out = list(self.output_columns)
        extra = []
        if not self.includeResolved:
            extra.append("kind")
        if self.deadLetterTopic:
            extra += ["kind", "data", "message_id", "error"]
        out += [name for name in dict.fromkeys(extra) if name not in out]
        return tuple(out)

    @property
    def endpoint_description(self) -> str:
        """Where Pub/Sub is, for error messages (never credentials)."""
        host = self.effective_emulator_host
        return f"the emulator at {host}" if host else (self.endpoint or "pubsub.googleapis.com")

    @property
    def subscription_paths(self) -> list[str]:
        """Full ``projects/P/subscriptions/S`` paths, in the order given."""
        out = []
        for raw in self.subscription.split(","):
            item = raw.strip()
            if not item:
                raise ValueError("subscription has an empty entry in its comma-separated list")
            m = _SUBSCRIPTION_PATH.match(item)
            if m:
                if not _RESOURCE_ID.match(m.group("sub")):
                    raise ValueError(f"subscription id {m.group('sub')!r} is not a valid Pub/Sub id")
                out.append(item)
                continue
            if "/" in item:
                raise ValueError(f"subscription {item!r}: expected projects/P/subscriptions/S or a bare id")
            if not _RESOURCE_ID.match(item):
                raise ValueError(
                    f"subscription id {item!r} is not a valid Pub/Sub id (3-255 characters, starting with a letter)"
                )
            if not self.projectId:
                raise ValueError(
                    f"subscription {item!r} is a bare id: give projectId or the full path projects/P/subscriptions/{item}"
                )
            out.append(f"projects/{self.projectId}/subscriptions/{item}")
        if len(set(out)) != len(out):
            raise ValueError("subscription lists the same subscription twice")
        return out

    @property
    def dead_letter_topic_path(self) -> str | None:
        if self.deadLetterTopic is None:
            return None
        item = self.deadLetterTopic.strip()
        if _TOPIC_PATH.match(item):
            return item
        if "/" in item or not _RESOURCE_ID.match(item):
            raise ValueError(f"deadLetterTopic {item!r}: expected projects/P/topics/T or a valid topic id")
        if not self.projectId:
            raise ValueError(f"deadLetterTopic {item!r} is a bare id: give projectId or projects/P/topics/{item}")
        return f"projects/{self.projectId}/topics/{item}"

    @property
    def topic_paths(self) -> list[str]:
        if not self.topic:
            return []
        out = []
        for raw in self.topic.split(","):
            item = raw.strip()
            m = _TOPIC_PATH.match(item)
            if m:
                out.append(item)
                continue
            if "/" in item or not _RESOURCE_ID.match(item):
                raise ValueError(f"topic {item!r}: expected projects/P/topics/T or a valid topic id")
            project = self.projectId or _SUBSCRIPTION_PATH.match(self.subscription_paths[0]).group("project")  # type: ignore[union-attr]
            out.append(f"projects/{project}/topics/{item}")
        return out

    def credential_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments ``transport.load_credentials`` takes from these options."""
        return {
            "emulator_host": self.effective_emulator_host,
            "credentials_json": self.credentialsJson.get_secret_value() if self.credentialsJson else None,
            "credentials_file": self.credentialsFile.get_secret_value() if self.credentialsFile else None,
        }

    def decoder_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments ``decode_messages`` takes from these options (their ``decode_as``)."""
        out = {arg: getattr(self, name) for name, arg in _DECODE_AS.items()}
        if self.deadLetterTopic:
            out["mode"] = "PERMISSIVE"  # with a dead-letter topic the source sees malformed rows itself
        return out

    def __repr__(self) -> str:  # SecretStr already masks; keep the repr short and explicit
        shown = {k: v for k, v in self.model_dump().items() if v is not None}
        for secret in ("credentialsFile", "credentialsJson"):
            if secret in shown:
                shown[secret] = "**********"
        return f"SourceOptions({shown})"

    __str__ = __repr__


_CANONICAL = {name.lower(): name for name in SourceOptions.model_fields}


# What each option's Field says beyond pydantic's own settings (see the comment on the fields).
# (every Field here gives json_schema_extra as a dict, never pydantic's callable form)
_EXTRAS = {
    name: dict(cast("dict[str, Any]", field.json_schema_extra or {}))
    for name, field in SourceOptions.model_fields.items()
}
_DECODE_AS: dict[str, str] = {name: extra["decode_as"] for name, extra in _EXTRAS.items() if "decode_as" in extra}


def option_table() -> str:
    """Render the options as a Markdown table (option, default, meaning), generated from the model.

    The README's option table and the DataSource's docstring are this text.
    """
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for name, field in SourceOptions.model_fields.items():
        extra = _EXTRAS[name]
        if "shown_default" in extra:
            default = extra["shown_default"]
        elif field.default is None:
            default = ""
        elif isinstance(field.default, bool):
            default = f"`{str(field.default).lower()}`"
        elif isinstance(field.default, int):
            default = f"{field.default:,}"
        else:
            default = f"`{field.default}`"
        rows.append(f"| `{name}` | {default} | {field.description} |")
    return "\n".join(rows) + "\n"


def _accepted(name: str) -> str:
    field = SourceOptions.model_fields[name]
    if name == "envelope":
        return "one of " + ", ".join(ENVELOPES)
    if name == "mode":
        return "one of " + ", ".join(MODES)
    if name == "receiver":
        return "driver or executors"
    if name == "batchTransfer":
        return "fetch or tasks"
    if name == "stateDir":
        return "an absolute path, file:///path or gs://bucket/prefix"
    if name == "columns":
        return "a comma-separated list of output columns, each once, in the order wanted, of " + ", ".join(COLUMN_NAMES)
    if field.annotation in (bool, bool | None):
        return "true or false"
    lo = hi = None
    for meta in field.metadata:
        lo = getattr(meta, "ge", lo)
        hi = getattr(meta, "le", hi)
    if lo is not None or hi is not None:
        extra = ""
        if name == "ackDeadlineSeconds":
            extra = " (10-600 against the real service; 1-600 against the emulator)"
        if name.endswith("Bytes") or name.endswith("BytesPerTrigger"):
            extra = " bytes; suffixes such as 64MB or 1GiB are accepted"
        return f"an integer from {lo} to {hi}{extra}"
    return "see the README's option table"


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map and return :class:`SourceOptions`.

    Keys are matched case-insensitively. Raises :class:`OptionError` naming the option, the bad
    value (never for credentials) and what is accepted, with a close-match suggestion for unknown
    keys.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        if key.lower() == "path":
            # ``load("sub")`` passes the subscription as Spark's path option.
            key = "subscription"
        canonical = _CANONICAL.get(key.lower())
        if canonical is None:
            close = difflib.get_close_matches(key.lower(), list(_CANONICAL), n=1, cutoff=0.6)
            hint = f" Did you mean '{_CANONICAL[close[0]]}'?" if close else ""
            problems.append(f"unknown option '{key}'.{hint} Known options: {', '.join(sorted(_CANONICAL.values()))}")
            continue
        if canonical in values:
            problems.append(f"option '{canonical}' is given twice (as '{key}' and another spelling)")
            continue
        if isinstance(value, str) and canonical not in ("credentialsJson",) and _CONTROL.search(value):
            problems.append(f"option '{canonical}' contains control characters")
            continue
        values[canonical] = value
    if problems:
        raise OptionError("crdb_pubsub: " + "; ".join(problems))
    if "subscription" not in values:
        raise OptionError(
            "crdb_pubsub: option 'subscription' is required: projects/P/subscriptions/S, "
            "or an id with option 'projectId' (a comma-separated list reads several)"
        )
    try:
        return SourceOptions(**values)
    except ValidationError as exc:
        raise OptionError("crdb_pubsub: " + "; ".join(_describe(err, values) for err in exc.errors())) from None


def _describe(err: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    loc = err.get("loc") or ()
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ")
    if not loc:
        return msg
    name = str(loc[0])
    if name in ("credentialsFile", "credentialsJson"):
        return f"option '{name}': {msg} (value not shown)"
    shown = values.get(name)
    return f"option '{name}'={shown!r} is not accepted: {msg}; accepted: {_accepted(name)}"
