"""Row values, generated deterministically and kept in their changefeed-JSON form, and the live rows."""

from __future__ import annotations

import datetime as _dt
import random
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

_CITIES = (
    "amsterdam",
    "boston",
    "los angeles",
    "new york",
    "paris",
    "rome",
    "san francisco",
    "seattle",
    "washington dc",
    "münchen",
    "東京",
)
_FIRST = ("Timothy", "Susan", "Brad", "Zoë", "Jürgen", "東京", "Chloé", "Ngozi", "Søren", "Ana")
_LAST = ("Jackson", "Harrington", "Hill", "Müller", "O'Brien", "García", "太郎", "Nguyen")
_STREETS = ("Peter Divide", "Andrew Roads", "Stephen Gardens", "Gentry Plains", "Rue de l'Été", "Chelsey Tunnel")
# Awkward but legal contents: quotes, backslashes, HTML characters, a tab, a 4-byte emoji.
_ODD_ADDRESSES = ('12 "Quoted" Lane', "Café & Bar <2>", "Unit 4\\5 Back St", "Tab\tRoad 7", "Bike 🚲 Way 1")
_TAGS = ("red", "fast", "électrique", "🚲", "new", "needs-repair", "東京")
_BRANDS = ("Schwinn", "Fuji", "Merida", "Trek", "Xiaomi")
_COLORS = ("red", "yellow", "black", "green", "blue")
INT8_MAX = 9223372036854775807
INT8_MIN = -9223372036854775808
_EPOCH_2019 = _dt.datetime(2019, 1, 1)


class Generator:
    """Draws rows and changes for the movr tables from one ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def decimal(self, precision: int, scale: int) -> Decimal:
        # scaleb keeps the exponent, so 2630 -> Decimal("26.30") with its trailing zero.
        digits = self.rng.choice((4, 6, precision))
        return Decimal(self.rng.randrange(10**digits)).scaleb(-scale)

    def timestamp(self, tz: bool) -> str:
        offset = _dt.timedelta(seconds=self.rng.randrange(7 * 365 * 86400))
        micros = self.rng.choice((0, 123456, 100000, self.rng.randrange(1_000_000)))
        ts = _EPOCH_2019 + offset + _dt.timedelta(microseconds=micros)
        return _format_timestamp(ts, tz)

    def maybe(self, value: Any, p_null: float = 0.1) -> Any:
        return None if self.rng.random() < p_null else value

    # ---- users
    def user(self) -> dict[str, Any]:
        r = self.rng
        return {
            "id": self.uuid(),
            "city": r.choice(_CITIES),
            "name": self.maybe(f"{r.choice(_FIRST)} {r.choice(_LAST)}", 0.05),
            "address": self.maybe(self.address()),
            "credit_card": self.maybe("%010d" % r.randrange(10**10)),
            "balance": self.maybe(self.decimal(12, 2)),
            "created_at": self.maybe(self.timestamp(tz=False), 0.05),
        }

    def address(self) -> str:
        r = self.rng
        if r.random() < 0.15:
            return r.choice(_ODD_ADDRESSES)
        return f"{r.randint(1, 99999)} {r.choice(_STREETS)}" + r.choice(("", " Apt. 47", " Suite 94"))

    def user_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "name": lambda: f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}",
            "address": self.address,
            "credit_card": lambda: "%010d" % self.rng.randrange(10**10),
            "balance": lambda: self.decimal(12, 2),
        }
        return self._change_some(row, fields)

    # ---- vehicles
    def vehicle(self) -> dict[str, Any]:
        r = self.rng
        return {
            "city": r.choice(_CITIES),
            "id": self.uuid(),
            "type": r.choice(("bike", "scooter", "skateboard")),
            "status": r.choice(("available", "in_use", "lost")),
            "ext": self.ext(),
            "odometer": self.maybe(self.odometer(), 0.05),
            "last_service": self.maybe(self.timestamp(tz=True)),
            "tags": self.maybe(self.tags()),
            "is_electric": r.random() < 0.5,
        }

    def odometer(self) -> int:
        r = self.rng
        kind = r.random()
        if kind < 0.1:
            return INT8_MAX
        if kind < 0.12:
            return INT8_MIN
        if kind < 0.5:
            return r.randint(2**53 + 1, INT8_MAX)
        return r.randrange(1_000_000)

    def tags(self) -> list[str]:
        return self.rng.sample(_TAGS, self.rng.randint(0, 3))

    def ext(self) -> Any:
        r = self.rng
        if r.random() < 0.08:
            return None  # JSON null (or SQL NULL): both are encoded as plain `null`.
        ext: dict[str, Any] = {"brand": r.choice(_BRANDS), "color": r.choice(_COLORS)}
        if r.random() < 0.6:
            ext["specs"] = {
                "battery": {
                    "capacity_wh": r.randint(200, 900),
                    "cells": [r.randint(1, 99) for _ in range(r.randint(0, 4))],
                },
                "weight_kg": Decimal(r.randint(50, 400)).scaleb(-1),
                "big": r.randint(2**53, INT8_MAX),
            }
        if r.random() < 0.4:
            ext["history"] = [{"km": r.randint(0, 5000), "note": self.maybe("ok", 0.5)} for _ in range(r.randint(1, 3))]
        return ext

    def vehicle_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "status": lambda: self.rng.choice(("available", "in_use", "lost")),
            "odometer": self.odometer,
            "last_service": lambda: self.timestamp(tz=True),
            "ext": self.ext,
            "tags": self.tags,
            "is_electric": lambda: not row["is_electric"],
        }
        return self._change_some(row, fields)

    # ---- rides
    def ride(self, rider_id: str | None, vehicle_id: str | None) -> dict[str, Any]:
        r = self.rng
        return {
            "id": self.uuid(),
            "city": r.choice(_CITIES),
            "rider_id": rider_id or self.uuid(),
            "vehicle_id": vehicle_id or self.uuid(),
            "revenue": self.maybe(self.decimal(10, 2)),
            "start_time": self.timestamp(tz=False),
            "end_time": self.maybe(self.timestamp(tz=False), 0.5),
            "distance": self.maybe(self.distance()),
            "raw": self.maybe(self.raw_bytes()),
        }

    def distance(self) -> float | str:
        r = self.rng
        if r.random() < 0.08:
            # CockroachDB encodes non-finite FLOATs as these JSON strings.
            return r.choice(("NaN", "Infinity", "-Infinity"))
        return r.choice((round(r.uniform(0, 50), 3), float(r.randint(0, 40)), 1e-7 * r.randint(1, 9)))

    def raw_bytes(self) -> str:
        return "\\x" + self.rng.randbytes(self.rng.randint(0, 8)).hex()

    def ride_update(self, row: dict[str, Any]) -> dict[str, Any]:
        fields = {
            "end_time": lambda: self.timestamp(tz=False),
            "revenue": lambda: self.decimal(10, 2),
            "distance": self.distance,
            "raw": self.raw_bytes,
        }
        return self._change_some(row, fields)

    def _change_some(self, row: dict[str, Any], fields: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        # Redraw until something really changes: every update then yields at least one message
        # (an unchanged column family emits nothing, so a no-op update would vanish).
        for _ in range(20):
            new = dict(row)
            for name in self.rng.sample(sorted(fields), self.rng.randint(1, 2)):
                new[name] = fields[name]()
            if new != row:
                return new
        raise AssertionError("could not draw a changed row")  # pragma: no cover


def _format_timestamp(ts: _dt.datetime, tz: bool) -> str:
    # CockroachDB trims trailing zeros of the fraction and drops it when it is zero.
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        text += ("." + "%06d" % ts.microsecond).rstrip("0")
    return text + ("Z" if tz else "")


class LiveRows:
    """Live primary keys of one table with O(1) insert, delete and random choice."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str) -> None:
        self._pos[key] = len(self._keys)
        self._keys.append(key)

    def remove(self, key: str) -> None:
        i = self._pos.pop(key)
        last = self._keys.pop()
        if i < len(self._keys):
            self._keys[i] = last
            self._pos[last] = i

    def choice(self, rng: random.Random) -> str:
        return self._keys[rng.randrange(len(self._keys))]
