"""RLinf passes the conformance suite (through the pytest plugin) with RLinf's own agent-loop path, and the records
come from RLinf's actor batch.

Every kind runs in this process (RLinf imports here): ``agentbridge_rlinf.conformance.golden_records`` on RLinf's
dataset, ``AgentLoopWorker`` path and ``RolloutResult.to_actor_batch`` over one local Ray; the vision-language kind
is skipped (RLinf's agent loop passes no images: the adapter does not declare multimodal).
"""

from __future__ import annotations

from conftest import needs_rlinf

from agentbridge.conformance.pytest_plugin import conformance_tests

pytestmark = needs_rlinf

# one test per golden case: the episodes RLinf trains on are the driver's, token for token, also when RLinf's own
# lengths (data.max_prompt_length, runner.seq_length) are below the spec's budgets; per-turn credit reaches RLinf
# summed on one reward per episode
test_rlinf_conforms = conformance_tests("rlinf")
