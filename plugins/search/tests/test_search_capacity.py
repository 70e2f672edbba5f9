"""search/multihop's and search/query_writing's capacity: the questions of the split in the world, all reachable,
and one more is one line."""

from __future__ import annotations

import pytest
from small_world import SMALL

from agentbridge.datasets import declared_capacity
from agentbridge.spec.schema import DatasetSpec
from agentbridge_search.data import multihop_capacity, multihop_tasks
from agentbridge_search.query_writing import query_tasks


@pytest.mark.parametrize("kinds", [None, ["fic_company_mayor"]])
def test_every_question_of_the_split_is_reachable_and_one_more_is_refused(kinds: list[str] | None) -> None:
    seen: dict[str, set[str]] = {}
    for split in ("train", "dev", "eval"):
        n = multihop_capacity(split, world=SMALL, kinds=kinds)
        tasks = multihop_tasks(split, n, seed=4, world=SMALL, kinds=kinds)
        seen[split] = {t.data["question"] for t in tasks}
        assert len(tasks) == n == len(seen[split]) > 0
        with pytest.raises(ValueError, match=rf"^search/multihop can produce at most {n} distinct {split} tasks "
                                             rf"\(world_seed=0.*\), asked for {n + 1}; the world has only {n} "):
            multihop_tasks(split, n + 1, world=SMALL, kinds=kinds)
    assert not seen["train"] & seen["dev"] and not seen["train"] & seen["eval"] and not seen["dev"] & seen["eval"]


def test_query_writing_declares_the_same_capacity() -> None:
    ds = DatasetSpec(id="search/query_writing", split="dev", args={"world": SMALL})
    n = declared_capacity(query_tasks, ds)
    assert n == multihop_capacity("dev", world=SMALL) and len(query_tasks("dev", n, world=SMALL)) == n
    with pytest.raises(ValueError, match=f"can produce at most {n} distinct dev tasks"):
        query_tasks("dev", n + 1, world=SMALL)
