"""ROLL passes the conformance suite (through the pytest plugin) with ROLL's own env-manager path, and the records
come from ROLL's rollout batch.

Every kind runs in this process where ROLL imports: ``agentbridge_roll.conformance.golden_records`` builds the job's
``AgenticConfig``, runs agentbridge's env managers against ROLL's ``GroupQueueManager`` on local Ray with ROLL's
``PolicyProxy`` over a golden router client, and reads ``get_batch``'s trajectories back; the vision-language kind is
skipped (the adapter does not declare multimodal).
"""

from __future__ import annotations

from roll_helpers import needs_roll

from agentbridge.conformance.pytest_plugin import conformance_tests

pytestmark = needs_roll

# one test per golden case: the trajectories ROLL trains on are the driver's, token for token, also when ROLL's one
# length (sequence_length) is below the spec's budgets; per-turn credit reaches ROLL summed on one reward per episode
test_roll_conforms = conformance_tests("roll")
