"""The learned fast paths: a family's own (:class:`LearnedFast`), and one pass per frame.

Bare, enriched and Debezium bodies each have a fast path over layouts learned from the batch
itself, defined in the family's module as a :class:`LearnedFast`: the frames its layouts sit in
(:mod:`.layouts`), which layouts it takes, and how it builds the rows of a matched group
(:mod:`.rowcolumns`). The decoder runs the learned fast paths of one frame as one pass over the
batch (:func:`merged`): the layouts are learned and their bodies proven once (:mod:`.matching`,
v2 bodies grouped by topic first, :mod:`.topics`), and each matched group goes to the family that
accepts its keys. What a fast path cannot prove is left to the general path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from .columns import Part
from .layouts import Accept, Frame
from .matching import Matched, match_layouts
from .topics import by_topic

Build = Callable[[Matched, list[bytes]], tuple[np.ndarray, dict[str, pa.Array]]]
Quick = Callable[[list[bytes], Accept], "Matched | None"]


@dataclasses.dataclass(frozen=True)
class LearnedFast:
    """A family's learned-layout fast path (a :class:`~.envelopes.registry.FastPath`).

    ``envelopes``: the ``envelope`` option values it runs under; ``frames``: where its layouts sit;
    ``accept(keys)``: the layouts it takes (no two families of a frame take the same keys);
    ``reads``: the keys whose values ``build`` reads (None: all), the only ones taken out early;
    ``build(group, bodies)``: (ok mask, output columns) for the bodies of one matched layout, ok
    where the values hold what the general path requires of them (``group.frame`` and
    ``group.envelope`` say where and under which option); ``quick(bodies, accept)``: a cheaper
    proof of the whole batch in its first frame, tried first (None when the batch is not of one
    such layout).
    """

    envelopes: tuple[str, ...]
    frames: tuple[Frame, ...]
    accept: Accept
    build: Build
    reads: frozenset[str] | None = None
    quick: Quick | None = None

    def likely(self, first: bytes) -> int:
        return max(frame.likely(first) for frame in self.frames)

    def run(self, bodies: list[bytes], envelope: str) -> list[Part]:
        parts: list[Part] = []
        remaining = np.arange(len(bodies))
        for frame in sorted(self.frames, key=lambda f: -f.likely(bodies[0])) if bodies else ():
            subset = bodies if len(remaining) == len(bodies) else [bodies[i] for i in remaining.tolist()]
            found = _run_frame(frame, (self,), subset, envelope)
            taken = np.zeros(len(remaining), dtype=bool)
            for idx, cols in found:
                taken[idx] = True
                parts.append((remaining[idx], cols))
            remaining = remaining[~taken]
            if not len(remaining):
                break
        return parts


@dataclasses.dataclass(frozen=True)
class _FramePass:
    """The learned fast paths of one frame as one pass.

    The batch's layouts are learned once, and each matched layout goes to the family that accepts
    its keys.
    """

    frame: Frame
    paths: tuple[LearnedFast, ...]

    def likely(self, first: bytes) -> int:
        return self.frame.likely(first)

    def run(self, bodies: list[bytes], envelope: str) -> list[Part]:
        return _run_frame(self.frame, self.paths, bodies, envelope)


def merged(paths: Iterable[Any]) -> list[Any]:
    """Return ``paths`` with the learned fast paths of each frame merged into one pass.

    ``paths`` are registry.FastPath hooks; each frame's pass takes the place of its first path.
    """
    out: list[Any] = []
    at: dict[Frame, int] = {}
    for path in paths:
        if not isinstance(path, LearnedFast):
            out.append(path)
            continue
        for frame in path.frames:
            if frame in at:
                group = out[at[frame]]
                out[at[frame]] = _FramePass(frame, group.paths + (path,))
            else:
                at[frame] = len(out)
                out.append(_FramePass(frame, (path,)))
    return out


def _run_frame(frame: Frame, paths: tuple[LearnedFast, ...], bodies: list[bytes], envelope: str) -> list[Part]:
    """Decode the bodies of ``frame``'s learned layouts the ``paths`` take: [(positions, columns)]."""

    def accept(keys: tuple[str, ...]) -> bool:
        return any(p.accept(keys) for p in paths)

    def reads(keys: tuple[str, ...]) -> frozenset[str] | None:
        return next(p.reads for p in paths if p.accept(keys))

    groups: list[Matched] = []
    for part in by_topic(bodies) if frame.wrapper else [np.arange(len(bodies))]:
        sub = bodies if len(part) == len(bodies) else [bodies[i] for i in part.tolist()]
        for g in _match_part(frame, paths, sub, accept, reads):
            g.idx = part[g.idx]
            groups.append(g)
    ascii = np.fromiter(map(bytes.isascii, bodies), dtype=bool, count=len(bodies)) if groups else None
    parts: list[Part] = []
    for g in groups:
        assert ascii is not None  # made whenever there are groups
        g.ascii = ascii[g.idx]
        g.frame = frame
        g.envelope = envelope
        build = next(p.build for p in paths if p.accept(g.keys))
        ok, cols = build(g, [bodies[i] for i in g.idx.tolist()])
        if not ok.any():
            continue
        rows = g.idx
        if not ok.all():
            mask = pa.array(ok)
            cols = {k: v.filter(mask) for k, v in cols.items()}
            rows = rows[ok]
        parts.append((rows, cols))
    return parts


def _match_part(frame: Frame, paths: tuple[LearnedFast, ...], bodies: list[bytes], accept: Accept,
                reads: Callable[[tuple[str, ...]], frozenset[str] | None]) -> list[Matched]:  # fmt: skip
    """Match the layouts of ``bodies`` (a family's quick proof first, then the learned layouts)."""
    quick = next((p.quick(bodies, accept) for p in paths if p.quick is not None and p.frames[0] == frame), None)
    if quick is None:
        return match_layouts(bodies, frame, accept, reads)
    groups = [quick]
    rest = np.ones(len(bodies), dtype=bool)
    rest[quick.idx] = False
    rest_idx = np.flatnonzero(rest)
    if len(rest_idx):
        for g in match_layouts([bodies[i] for i in rest_idx.tolist()], frame, accept, reads):
            g.idx = rest_idx[g.idx]
            groups.append(g)
    return groups
