"""slime passes the conformance suite (through the pytest plugin) with slime's own rollout path, and the records come
from the training data slime builds (``RolloutManager._convert_samples_to_train_data``). Needs slime on PYTHONPATH.

The vision-language kind is skipped (the generate function sends SGLang token ids only: the adapter does not declare
multimodal)."""

from __future__ import annotations

from pathlib import Path

from slime_testkit import needs_slime

from agentbridge.conformance.pytest_plugin import conformance_tests

pytestmark = needs_slime

# one test per golden case: the samples slime trains on are the driver's, token for token, also when slime's own
# lengths (--rollout-max-prompt-len / -response-len / -context-len) are below the spec's budgets; per-turn credit
# reaches slime summed on one reward per sample
test_slime_conforms = conformance_tests("slime")


def test_slime_built_the_samples_and_normalised_the_rewards(tmp_path: Path) -> None:
    """slime's own Sample helper built each sample (its loss mask and log-probs aligned with the response), the
    requests went through slime's rollout to the stand-in router, and slime's grpo reward normalisation ran."""
    from slime.utils.types import Sample

    from agentbridge.conformance.golden import cases
    from agentbridge_slime.conformance import train_data

    data, samples, router = train_data("text", tmp_path)
    assert len(samples) == 2 * len(cases("text")) and all(isinstance(s, Sample) for s in samples)
    assert {s.status for s in samples} <= {Sample.Status.COMPLETED, Sample.Status.TRUNCATED, Sample.Status.FAILED}
    assert any(s.status == Sample.Status.TRUNCATED for s in samples)  # the truncation case
    assert any(s.status == Sample.Status.FAILED for s in samples)  # the early_error case: the fallback sample
    assert all(len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length for s in samples)
    assert all(s.metadata["agentbridge"]["task_id"] for s in samples)
    assert router.requests and all(r["return_logprob"] for r in router.requests)
    # two samples of each task, identical episodes: grpo's group-normalised rewards are all 0
    assert data["rewards"] == [0.0] * len(samples) and data["raw_reward"] != data["rewards"]
    assert data["rollout_mask_sums"] == [sum(m) for m in data["loss_masks"]]
