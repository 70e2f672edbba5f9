"""Generator: determinism, disjoint splits, consistent gold data, statistics."""

from __future__ import annotations

import json

from small_world import SMALL

from agentbridge_search.cli import main
from agentbridge_search.data import build_world, multihop_tasks, statistics


def test_same_seed_same_world_and_tasks() -> None:
    a = build_world(3, **SMALL)
    build_world.cache_clear()
    b = build_world(3, **{**SMALL, "distractors": 100})  # from the on-disk cache
    assert a.key == b.key and a.questions == b.questions
    from agentbridge_search import data

    fresh = data._fictional(3, 20, 30, 60, set())  # regenerated from scratch, no cache involved
    assert fresh == data._fictional(3, 20, 30, 60, set())
    assert fresh != data._fictional(4, 20, 30, 60, set())
    t1 = [t.to_dict() for t in multihop_tasks("train", 40, seed=1, world_seed=3, world=SMALL)]
    assert t1 == [t.to_dict() for t in multihop_tasks("train", 40, seed=1, world_seed=3, world=SMALL)]
    assert t1 != [t.to_dict() for t in multihop_tasks("train", 40, seed=2, world_seed=3, world=SMALL)]


def test_splits_disjoint_and_gold_consistent() -> None:
    world = build_world(0, **SMALL)
    by_id = {p.id: p for p in world.passages}
    assert len(by_id) == len(world.passages)
    train = {t.data["question"] for t in multihop_tasks("train", 200, seed=0, world=SMALL)}
    held = multihop_tasks("eval", 40, seed=0, world=SMALL)
    dev = {t.data["question"] for t in multihop_tasks("dev", 20, seed=0, world=SMALL)}
    assert not train & {t.data["question"] for t in held} and not dev & train
    assert not dev & {t.data["question"] for t in held}
    kinds = {t.data["kind"] for t in held}
    assert any(k.startswith("geo_") for k in kinds) and any(k.startswith("fic_") for k in kinds)
    for q in world.questions:
        assert all(s in by_id for s in q.support) and len(q.queries) == q.hops >= 2
        assert q.answers[0] in by_id[q.support[-1]].text  # the last hop's passage states the answer
    assert any(p.id.startswith("wiki-") for p in world.passages)


def test_statistics_and_cli(capsys) -> None:
    stats = statistics(build_world(0, **SMALL))
    assert stats["passages"] == sum(stats["passages_by_source"].values())
    assert sum(stats["splits"].values()) == stats["questions"]
    assert main(["stats", "--json", "--world", json.dumps(SMALL)]) == 0
    assert json.loads(capsys.readouterr().out)["world_key"] == stats["world_key"]
    assert main(["stats", "--world", "[1]"]) == 2
    assert "--world must be a JSON object" in capsys.readouterr().err


def test_too_many_tasks_is_one_line() -> None:
    import pytest

    with pytest.raises(ValueError, match="has only"):
        multihop_tasks("eval", 10**6, world=SMALL)
    with pytest.raises(ValueError, match="split must be"):
        multihop_tasks("valid", 1, world=SMALL)
