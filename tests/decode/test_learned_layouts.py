"""The learned-layout machinery the bare, enriched and Debezium fast paths share
(``decode/layouts.py``, ``matching.py``, ``passes.py``): layouts learned from the batch itself,
several per batch, and one pass per frame for the families whose layouts sit in the same place."""

from __future__ import annotations

import numpy as np
import pytest

from crdb_pubsub.decode import layouts, matching, passes
from crdb_pubsub.decode.envelopes import registry
from crdb_pubsub.tools.simulator import ChangefeedSimulator

from .fast_check import assert_same, bench_decode, fast_count


def test_the_learned_fast_paths_of_one_frame_run_as_one_pass() -> None:
    hooks = [f.fast for f in registry.FAMILIES if f.fast is not None and "auto" in f.fast.envelopes]
    merged = passes.merged(hooks)
    frames = [getattr(p, "frame", None) for p in merged]
    learned = [h for h in hooks if isinstance(h, passes.LearnedFast)]
    assert set(frames) - {None} == {f for h in learned for f in h.frames}
    assert len([f for f in frames if f is not None]) == len(set(frames) - {None})  # one pass per frame
    v2 = merged[frames.index(layouts.V2_CRDB)]
    assert {p.build.__module__.rsplit(".", 1)[-1] for p in v2.paths} == {"bare", "enriched"}
    assert frames.count(None) == len(hooks) - len(learned)  # the others as they are


def test_several_layouts_in_one_batch_are_learned() -> None:
    sim = ChangefeedSimulator(seed=3, envelope="bare", updated=True)
    bodies = [m.data for m in sim.events(300) if m.kind == "row"]
    assert len({b.split(b'"Topic":')[1] for b in bodies}) == 3  # users, vehicles, rides: three layouts
    assert fast_count(bodies) == len(bodies)
    assert_same(bodies)


def test_bodies_of_every_learned_family_in_one_batch() -> None:
    bodies = [b for env in ("bare", "enriched", "debezium") for b in bench_decode.make_bodies(20, seed=6, envelope=env)]
    assert fast_count(bodies) == len(bodies)
    assert_same(bodies)


def test_a_matched_group_names_its_fields() -> None:
    with pytest.raises(TypeError):
        matching.Matched(np.arange(1), ("a",), {"a": [b"1"]})  # type: ignore[misc]
    group = matching.Matched(idx=np.arange(1), keys=("a",), values={"a": [b"1"]})
    assert group.key is None and group.topic is None and group.after is None and group.built == {}
