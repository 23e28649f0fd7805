"""A Pull response read from its bytes (``pull_parse``) answers as upb does, or leaves it to upb.

Seeded random responses, most in the layout the service sends and the rest bent out of it:
unknown, reordered and repeated fields, explicit defaults, overlong and 10-byte varints, attributes,
strings that are not UTF-8, truncated or altered bytes. For each, ``wire.pulled_batch`` on the bytes
must give what it gives on upb's parse of them, or raise what upb raises.
"""

from __future__ import annotations

import random
import time

import pytest
from google.protobuf.message import DecodeError
from google.pubsub_v1.types import pubsub

from crdb_pubsub.source import pull_parse, wire

PullResponse = pubsub.PullResponse.pb()
CASES = 400


@pytest.fixture
def every_response(monkeypatch):
    """Read responses of any size from the bytes (the fuzzed ones hold at most 20 messages)."""
    monkeypatch.setattr(pull_parse, "FEWEST", 0)


def _varint(value: int, pad: int = 0) -> bytes:
    """``value`` as a varint (negative: its 64-bit two's complement), ``pad`` needless bytes longer."""
    value &= (1 << 64) - 1
    groups = []
    while True:
        groups.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    groups += [0] * pad
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def _field(number: int, payload: bytes | int, rng: random.Random, bends: set[str]) -> bytes:
    """One field: length-delimited for bytes, a varint for an int (some overlong when bent so)."""
    pad = rng.choice([0, 0, 0, 1, 4]) if "overlong" in bends else 0
    if isinstance(payload, int):
        if "wide" in bends and rng.random() < 0.3:  # ten bytes, bits past the 64th in the last
            low = payload & (2**63 - 1)
            return _varint(number << 3) + bytes([(low >> 7 * i) & 0x7F | 0x80 for i in range(9)] + [rng.randrange(128)])
        return _varint(number << 3) + _varint(payload, pad)
    return _varint(number << 3 | 2) + _varint(len(payload), pad) + payload


def _unknown(rng: random.Random) -> bytes:
    number = rng.choice([6, 7, 15, 16, 100, 2**20])
    kind = rng.randrange(4)
    if kind == 0:
        return _varint(number << 3) + _varint(rng.randrange(2**64))
    if kind == 1:
        return _varint(number << 3 | 2) + _varint(3) + b"xyz"
    if kind == 2:
        return _varint(number << 3 | 5) + bytes(4)
    return _varint(number << 3 | 1) + bytes(8)


def _string(rng: random.Random, longest: int, bends: set[str]) -> bytes:
    kind = rng.randrange(12)
    if kind == 0:
        return b""
    if kind == 1:
        return "é日本-\u00ff".encode() * rng.randrange(1, 4)
    if kind < 4 and "utf8" in bends:
        return rng.choice([b"\xff", b"a\xc0\x80", b"\xed\xa0\x80", b"ok\xe6\x97"])  # not UTF-8
    chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_\x12\x0a"
    return "".join(rng.choice(chars) for _ in range(rng.randint(1, longest))).encode()


def _message(rng: random.Random, bends: set[str]) -> bytes:
    """A ReceivedMessage's bytes: its fields in order, defaults left out (some kept when bent so)."""

    def keep(value) -> bool:
        return bool(value) or ("defaults" in bends and rng.random() < 0.5)

    seconds = rng.choice([0, 1_700_000_000, -1, -62_135_596_800, 253_402_300_799, 2**63 - 1, -(2**63)])
    nanos = rng.choice([0, 999_999_999, 1, -1, -999_999_999, rng.randrange(10**9), 2**31 - 1, -(2**31)])
    if "wide" in bends:  # an int32 as any varint: upb keeps its low 32 bits
        nanos = rng.choice([2**32 + 5, 2**63 + 2**31, rng.randrange(2**64), nanos])
    stamp = []
    if keep(seconds):
        stamp.append((1, seconds))
    if keep(nanos):
        stamp.append((2, nanos))
    fields = []
    data = rng.randbytes(rng.choice([0, 1, 5, 200, 300, 300, 300, 3000]))  # 3000: the walk in Python
    if keep(data):
        fields.append((1, data))
    if "attributes" in bends and rng.random() < 0.5:
        # Map entries, bent their own ways: {1: key, 2: value} reordered, with unknown fields, not UTF-8.
        odd = bends | {"reorder", "unknown", "utf8"}
        for _ in range(1 if rng.random() < 0.9 else rng.choice([2, 3])):  # upb alone reads more than one
            entry = [(n, _string(rng, 10, odd if rng.random() < 0.05 else bends)) for n in (1, 2)]
            fields.append(
                (2, _encode([(n, v) for n, v in entry if keep(v)], rng, odd if rng.random() < 0.3 else bends))
            )
    mid = _string(rng, 20, bends)
    if keep(mid):
        fields.append((3, mid))
    if stamp or rng.random() < 0.9:
        fields.append((4, _encode(stamp, rng, bends)))
    key = rng.choice([b"", b"", b"" if "utf8" not in bends else b"k", _string(rng, 30, bends)])
    if keep(key):
        fields.append((5, key))
    outer = []
    ack_id = _string(rng, 200, bends)
    if keep(ack_id):
        outer.append((1, ack_id))
    if rng.random() < 0.95:
        outer.append((2, _encode(fields, rng, bends)))
    attempt = rng.choice([0, 0, 1, 5, 2**31 - 1, -1, 2**40 if "wide" in bends else 2])
    if keep(attempt):
        outer.append((3, attempt))
    return _encode(outer, rng, bends)


def _encode(fields: list, rng: random.Random, bends: set[str]) -> bytes:
    """A message of ``fields``; as bent, sometimes reordered, repeated or with unknown fields."""
    fields = list(fields)
    if "reorder" in bends and rng.random() < 0.3:
        rng.shuffle(fields)
    if "repeat" in bends and fields and rng.random() < 0.3:
        fields.append(rng.choice(fields))
    parts = [_field(number, payload, rng, bends) for number, payload in fields]
    if "unknown" in bends and rng.random() < 0.3:
        parts.insert(rng.randint(0, len(parts)), _unknown(rng))
    return b"".join(parts)


BENDS = ["utf8", "defaults", "attributes", "overlong", "wide", "reorder", "repeat", "unknown", "truncate", "alter"]


def _response(rng: random.Random, bends: set[str] | None = None) -> bytes:
    """One response's bytes: as the service sends them, or bent one or two ways out of that."""
    if bends is None:
        bends = set(rng.sample(BENDS, rng.randint(1, 2))) if rng.random() < 0.6 else set()
    n = rng.choice([0, 1, 2, 3, 5, 8, 20])
    # Overlong lengths inside messages, not of the messages themselves, more often than not: those
    # make the response one the bytes are read from, or one upb refuses (a length over 5 bytes).
    top = bends - {"overlong"} if rng.random() < 0.7 else bends
    raw = b"".join(_field(1, _message(rng, bends), rng, top) for _ in range(n))
    if "unknown" in bends and rng.random() < 0.3:
        raw = _unknown(rng) + raw if rng.random() < 0.5 else raw + _unknown(rng)
    if "truncate" in bends and raw:
        raw = raw[: rng.randrange(len(raw))]
    if "alter" in bends and raw:
        at = rng.randrange(len(raw))
        raw = raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1 :]
    return raw


def _assert_same(raw: bytes) -> bool:
    """Assert the bytes read as upb reads them; whether they were read without upb."""
    try:
        parsed = PullResponse.FromString(raw)
    except DecodeError:
        with pytest.raises(DecodeError):
            wire.pulled_batch(raw)
        assert pull_parse.parse(raw) is None
        return False
    ack_ids, mids, batch = wire.pulled_batch(raw)
    want_acks, want_mids, want = wire.pulled_batch(parsed)
    assert (ack_ids, mids) == (want_acks, want_mids)
    assert batch.schema == want.schema and batch.equals(want), (batch.to_pylist(), want.to_pylist())
    return pull_parse.parse(raw) is not None


def test_the_bytes_read_as_upb_reads_them(every_response):
    rng = random.Random(48)
    started = time.monotonic()
    read = sum(_assert_same(_response(rng)) for _ in range(CASES))
    # Most cases are in the service's layout: the bulk reading is what is being compared.
    assert read > CASES // 3, read
    assert time.monotonic() - started < 5


def test_attributes_read_as_upb_reads_them(every_response):
    rng = random.Random(480)
    bents = [{"attributes", rng.choice(BENDS)} for _ in range(CASES // 2)]
    read = sum(_assert_same(_response(rng, bends)) for bends in bents)
    assert read > CASES // 20, read


def test_the_messages_are_found_as_upb_finds_them(every_response):
    """The response's own layout bent, its messages not: found by upb's split, or walked when large."""
    rng = random.Random(4800)
    read = 0
    for case in range(CASES // 2):
        messages = [_message(rng, set()) for _ in range(rng.randint(1, 6))]
        if case % 2:  # a large first message: the messages are walked
            big = pubsub.ReceivedMessage.pb()(ack_id="big", message={"data": rng.randbytes(3000), "message_id": "1"})
            messages[0] = big.SerializeToString()
        fields = [_field(1, m, rng, set()) for m in messages]
        bend = rng.choice(["unknown", "overlong", "tag", "truncate", "none"])
        at = rng.randrange(len(fields))
        if bend == "unknown":
            fields.insert(rng.randint(0, len(fields)), _unknown(rng))
        elif bend == "overlong":
            fields[at] = _field(1, messages[at], rng, {"overlong"})
        elif bend == "tag":
            fields[at] = _varint(rng.choice([1 << 3, 1 << 3 | 5, 2 << 3 | 2, 0x8A])) + fields[at][1:]
        raw = b"".join(fields)
        if bend == "truncate":
            raw = raw[: rng.randrange(len(raw))]
        read += _assert_same(raw)
    assert read > CASES // 10, read


def test_a_response_from_protobuf_is_read_without_upb():
    rng = random.Random(7)
    pb = PullResponse()
    for i in range(pull_parse.FEWEST):
        rm = pb.received_messages.add()
        rm.ack_id = "".join(rng.choice("abcXYZ019-_") for _ in range(rng.randint(1, 200)))
        rm.message.data = rng.randbytes(rng.randrange(400))
        rm.message.message_id = str(10**15 + i)
        rm.message.publish_time.seconds = rng.choice([0, -5, 1_700_000_000 + i, 2**40])
        rm.message.publish_time.nanos = rng.randrange(10**9)
        rm.message.ordering_key = rng.choice(["", "", "k1", "日本"])
        rm.delivery_attempt = rng.choice([0, 1, 7])
    raw = pb.SerializeToString()
    assert pull_parse.parse(raw) is not None
    assert _assert_same(raw)
    del pb.received_messages[1:]
    assert pull_parse.parse(pb.SerializeToString()) is None  # fewer: upb's
    assert not _assert_same(pb.SerializeToString()) and not _assert_same(b"")


def test_one_attribute_a_message_is_read_without_upb_more_by_upb(every_response):
    pb = PullResponse()
    for i, attributes in enumerate([{"TABLE_NAME": "orders"}, {}, {"": ""}, {"TABLE_NAME": "日本"}]):
        rm = pb.received_messages.add()
        rm.ack_id, rm.message.message_id = f"a{i}", str(i)
        rm.message.attributes.update(attributes)
    raw = pb.SerializeToString()
    assert pull_parse.parse(raw) is not None and _assert_same(raw)
    assert wire.pulled_batch(raw)[2].column("attributes").to_pylist() == [
        [("TABLE_NAME", "orders")],
        None,
        [("", "")],
        [("TABLE_NAME", "日本")],
    ]
    pb.received_messages[1].message.attributes.update({"a": "1", "b": "2"})  # their order is upb's map's
    raw = pb.SerializeToString()
    assert pull_parse.parse(raw) is None and not _assert_same(raw)
