"""LoRA on OpenRLHF 0.11.2's actor, on CPU: only the adapter's weights move, and the reference log-probs are the base
model's (issue 36, item 2).

The adapter settings are the compiled job's: ``model.lora`` is refused on OpenRLHF (``OpenRLHFBackend.lora_why_not``:
the vLLM weight sync cannot load the unmerged PEFT names), so the adapter reaches the job the one way OpenRLHF has,
``backend.overrides`` of its ``ds.lora.*`` flags, and the test reads them back through OpenRLHF's own parser
(``step_probe.job_args``: ``launch.sh``'s argv through ``train_ppo_ray``'s ``__main__`` block).

OpenRLHF's own code run here (``openrlhf/`` in ``.venv-openrlhf/lib/python3.11/site-packages``):

- ``models/actor.py:76`` ``Actor.__init__``: the policy built as ``PolicyModelActor.init_model_from_pretrained``
  builds it (``trainer/ray/ppo_actor.py:513-528``: ``lora_rank`` / ``lora_alpha`` / ``target_modules`` /
  ``lora_dropout`` from ``ds.lora.*``, ``temperature`` from ``rollout.temperature``), so its LoRA is OpenRLHF's
  (``actor.py:177-188``: ``enable_input_require_grads``, ``LoraConfig``, ``get_peft_model``); the reference built as
  ``ReferenceModelActor.init_model_from_pretrained`` builds it (``trainer/ray/launcher.py:108-118``: the same
  pretrain path, no LoRA arguments: a separate plain model), which ``train_ppo_ray`` starts when
  ``algo.kl.init_coef`` > 0 (``cli/train_ppo_ray.py:93``);
- ``models/actor.py:221`` ``Actor.forward``: every log-prob here, the reference's as ``ReferenceModelActor.forward``
  asks for them (``launcher.py:146-153``), the policy's as ``training_step`` does (``ppo_actor.py:292``);
- the loss of ``ActorPPOTrainer.training_step`` (``ppo_actor.py:259-354``), in its order: ``get_loss_batch_info``
  (``utils/loss_utils.py:15``), ``PolicyLoss`` built as ``ActorPPOTrainer.__init__`` builds it (``ppo_actor.py:76``,
  via ``agentbridge_openrlhf.algorithm_probe.policy_loss``), ``compute_approx_kl`` (``models/utils.py:69``) against
  the reference's log-probs and ``aggregate_loss`` (``models/loss.py:11``) times ``algo.kl.init_coef`` (the fixed KL
  controller's coefficient), the entropy term when ``actor.entropy_coef`` is set.

Not run, and why: ``training_step`` itself (its module ``trainer/ray/ppo_actor.py`` imports ``deepspeed``,
``torchdata`` and ``openrlhf.utils.deepspeed``, none of which the CPU environment has) and its
``strategy.backward`` / ``strategy.optimizer_step`` (DeepSpeed's engine). In their place: ``loss.backward()``,
gradient clipping to ``actor.max_norm`` and ``torch.optim.AdamW`` with the job's ``actor.adam`` over OpenRLHF's
parameter groups (``get_optimizer_grouped_parameters``, ``utils/deepspeed/deepspeed_utils.py:121``: trainable
parameters only; restated in ``step_probe.actor_optimizer``, its module imports DeepSpeed). ``Actor`` is built with
``attn_implementation="eager"`` (the job's ``flash_attention_2`` needs flash-attn; ``actor.py`` imports only
flash-attn's padding helpers, here ``standins/cpu_serving/flash_attn``, unused without packed samples) and no
``ds_config`` (no DeepSpeed); it loads in the job's ``ds.param_dtype`` (bf16: ``convert_to_torch_dtype``,
``utils/utils.py:8``, takes only bf16 / fp16) and is then cast to float32, so the "base model" below is that
bf16-rounded checkpoint in float32.

Two training steps on the golden step batch (``agentbridge.conformance.step.step_batch``: twelve rows, prompt 4,
response 8, ratios inside and outside the clip range, GRPO advantages of the golden rewards): the first moves only
``lora_B`` (with B = 0 the gradient reaching A is zero), the second moves ``lora_A`` too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from agentbridge.testing import assert_only_the_adapter_trained, assert_reference_is_the_base

LORA = {"ds.lora.rank": 4, "ds.lora.alpha": 16, "ds.lora.target_modules": ["q_proj", "v_proj", "down_proj"]}
SETS = ["backend.name=openrlhf", "model.path=builtin:tiny-qwen2.5", "algorithm.name=grpo", "algorithm.steps=1",
        "algorithm.batch_size=3", "algorithm.group_size=4", "data.train.size=8", "data.eval.size=4",
        "algorithm.warm_start=null", "algorithm.kl_coef=0.05", "algorithm.lr=0.05", "algorithm.warmup_steps=0",
        "backend.overrides={ds.lora.rank: 4, ds.lora.alpha: 16, ds.lora.target_modules: [q_proj, v_proj, down_proj]}"]
TOL = 1e-6  # relative: float32 resolves a log-prob near -12 to 9.5e-7 (one ulp)


def openrlhf_actor_class() -> Any:
    """``openrlhf.models.actor.Actor``, importable on CPU: DeepSpeed's stand-in (already installed by ``job_args``)
    and flash-attn's padding helpers on the path for the import only (``ring_attn_utils`` binds them; they are
    called only for packed samples), then taken off again."""
    from agentbridge_openrlhf.standins import deepspeed, serve_rm

    deepspeed.install()
    helpers = str(Path(serve_rm.__file__).resolve().parent / "cpu_serving")
    sys.path.insert(0, helpers)
    try:
        from openrlhf.models.actor import Actor
    finally:
        sys.path.remove(helpers)
        for name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]:
            del sys.modules[name]
    return Actor


def base_logps(base: Any, batch: dict[str, Any], temperature: float) -> Any:
    """The response tokens' log-probs under ``base`` (a plain transformers model), from scratch, masked as
    ``Actor.forward`` masks them."""
    mask = batch["response_mask"]
    width = mask.shape[1]
    with torch.no_grad():
        logits = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits[:, -width - 1:-1].float() / temperature
    # x_i - logsumexp(x): log_softmax as OpenRLHF's log_probs_from_logits writes it (torch.log_softmax's kernel
    # rounds differently: 2 ulps, 2e-6, at log-probs near -12)
    logp = logits.gather(-1, batch["input_ids"][:, -width:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
    return logp * mask


def training_step(args: Any, actor: Any, optimizer: Any, batch: dict[str, Any], ref_logp: Any) -> float:
    """``ActorPPOTrainer.training_step``'s loss on ``batch`` (OpenRLHF's code, see the module docstring), then the
    backward, clipping to ``actor.max_norm`` and the optimizer step DeepSpeed's engine would take."""
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl
    from openrlhf.utils.loss_utils import get_loss_batch_info

    from agentbridge_openrlhf.algorithm_probe import policy_loss

    actor.train()
    mask = batch["response_mask"].bool()
    info = get_loss_batch_info(SimpleNamespace(args=args), mask)
    logp, output = actor(batch["input_ids"], mask, attention_mask=batch["attention_mask"], return_output=True,
                         return_entropy=args.actor.entropy_coef is not None)
    loss, *_ = policy_loss(args)(logp, batch["old_logp"], batch["advantages"], action_mask=mask,
                                 rollout_log_probs=None, **info)
    if args.algo.kl.use_loss and args.algo.kl.init_coef > 0:
        kl = compute_approx_kl(logp, ref_logp, log_probs_old=batch["old_logp"], kl_estimator=args.algo.kl.estimator,
                               unbiased_gradient=args.algo.kl.unbiased_gradient)
        loss = loss + aggregate_loss(kl, mask, **info) * args.algo.kl.init_coef
    if args.actor.entropy_coef is not None and args.actor.entropy_coef != 0:
        loss = loss - aggregate_loss(output.entropy[:, -mask.shape[1]:], mask, **info) * args.actor.entropy_coef
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in actor.parameters() if p.requires_grad], float(args.actor.max_norm))
    optimizer.step()
    return float(loss.detach())


def snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def base_name(name: str) -> str:
    """A LoRA actor's parameter name as the plain reference ``Actor`` names it (PEFT wraps the model and the
    targeted layers: ``model.base_model.model.`` and ``.base_layer``)."""
    return name.replace("model.base_model.model.", "model.", 1).replace(".base_layer.", ".")


@pytest.fixture(scope="module")
def lora_step(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from agentbridge.conformance.step import step_batch
    from agentbridge.models import resolve_model_path
    from agentbridge.spec import load_spec
    from agentbridge_openrlhf.backend import OpenRLHFBackend
    from agentbridge_openrlhf.step_probe import actor_optimizer, job_args

    torch.set_num_threads(1)
    spec = load_spec("examples/calculator.yaml", SETS)
    problems = [str(p) for p in OpenRLHFBackend().check(spec)]
    job = OpenRLHFBackend().compile(spec, tmp_path_factory.mktemp("openrlhf-lora") / "job")
    job.write_manifest()
    args = job_args(job.path)  # what train(args) receives: launch.sh's argv through OpenRLHF's parser
    Actor = openrlhf_actor_class()
    init = str(resolve_model_path(spec.model.path))
    common = {"attn_implementation": "eager", "param_dtype": args.ds.param_dtype,
              "packing_samples": args.ds.packing_samples, "temperature": args.rollout.temperature}
    torch.manual_seed(0)
    ref = Actor(init, **common).float().eval()  # ReferenceModelActor's model: no LoRA arguments
    actor = Actor(init, **common, lora_rank=args.ds.lora.rank, lora_alpha=args.ds.lora.alpha,
                  target_modules=args.ds.lora.target_modules, lora_dropout=args.ds.lora.dropout).float()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.ds.param_dtype]
    base = AutoModelForCausalLM.from_pretrained(init, dtype=dtype, attn_implementation="eager").float().eval()
    batch = step_batch(init)
    mask = batch["response_mask"].bool()

    def logps(model: Any) -> Any:  # Actor.forward with an action mask: ReferenceModelActor.forward's call
        model.eval()
        with torch.no_grad():
            return model(batch["input_ids"], mask, batch["attention_mask"])

    run: dict[str, Any] = {"args": args, "problems": problems, "actor": actor, "ref": ref, "mask": mask,
                           "base": base_logps(base, batch, args.rollout.temperature), "before": snapshot(actor),
                           "ref_params": snapshot(ref)}
    run["ref0"], run["policy0"] = logps(ref), logps(actor)  # the experience maker's, before any step
    optimizer = actor_optimizer(actor, args)
    run["loss1"] = training_step(args, actor, optimizer, batch, run["ref0"])
    run["after1"] = snapshot(actor)
    run["loss2"] = training_step(args, actor, optimizer, batch, run["ref0"])
    run["after2"] = snapshot(actor)
    run["ref2"], run["policy2"] = logps(ref), logps(actor)  # the next round's experience
    return run


def test_the_job_gives_openrlhf_a_lora_actor_and_a_plain_reference(lora_step: dict[str, Any]) -> None:
    from peft import PeftModel

    args = lora_step["args"]
    assert lora_step["problems"] == []
    assert (args.ds.lora.rank, args.ds.lora.alpha, list(args.ds.lora.target_modules)) == tuple(LORA.values())
    assert args.ds.lora.dropout == 0 and args.algo.kl.init_coef > 0  # > 0: train_ppo_ray starts the reference
    assert isinstance(lora_step["actor"].model, PeftModel) and not isinstance(lora_step["ref"].model, PeftModel)
    adapter = {n: p for n, p in lora_step["before"].items() if "lora_" in n}
    assert {n.split(".")[-4] for n in adapter} == set(LORA["ds.lora.target_modules"])
    assert all(p.shape[0 if ".lora_A." in n else 1] == args.ds.lora.rank for n, p in adapter.items())


def test_only_the_adapter_trains(lora_step: dict[str, Any]) -> None:
    before, after2 = lora_step["before"], lora_step["after2"]
    assert_only_the_adapter_trained(before, lora_step["after1"], after2, dict(lora_step["actor"].named_parameters()))
    for name in (n for n in before if "lora_" not in n):  # every base weight equal to the reference model's
        assert torch.equal(after2[name], lora_step["ref_params"][base_name(name)]), name


def test_reference_logps_are_the_base_models(lora_step: dict[str, Any]) -> None:
    """The reference model is the base model, before and after training the adapter."""
    assert_reference_is_the_base(lora_step, TOL)
