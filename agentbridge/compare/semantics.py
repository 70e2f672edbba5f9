"""What each backend's compiled job will actually do, side by side, read from the backend's own effective config.

Each adapter's validator fills ``Report.details["semantics"]`` (aspect -> one line) from the config the backend
itself builds (TRL's ``GRPOConfig``, veRL's composed Hydra config, OpenRLHF's parsed arguments), in shared words
first and, after `` · ``, in the backend's own names. Two backends differ on an aspect when the shared words
differ; the backends' own names are shown, never compared.

Adapters do not import this module: each writes the shared words of an aspect with ``agentbridge.spec.recipe``'s
word functions (``lora_words``, ``entropy_words``, ``grad_clip_words``, ``batch_words``, ``sampling_words``,
``optimizer_words``, ``overlong_words``, ...), which give the formats below (``tests/test_recipe_compare.py`` holds
every adapter's words to these functions, the same spec compiled for every backend giving the same shared words):

* ``LoRA`` (:func:`lora_words`): ``rank 16, alpha 32, targets all-linear`` or ``rank 16, alpha 32, targets q_proj
  v_proj`` (module names sorted, space-separated), then ``, dropout 0.05`` when the dropout is above 0; ``full
  fine-tuning`` without an adapter.
* ``entropy bonus`` (:func:`entropy_words`): ``coef 0.01`` (the loss minus coef x the mean token entropy); ``none``
  for a coefficient of 0 or none.
* ``grad clip`` (:func:`grad_clip_words`): ``max norm 0.5`` (the global gradient norm clipped to it); ``none`` when
  the gradient is not clipped.
* ``batch`` (:func:`batch_words`): ``8 prompts x 4 samples, 1 epoch(s) x 2 mini-batch(es)``: the step's prompts and
  samples per prompt, the passes over them and the optimizer steps per pass.
* ``overlong`` (:func:`overlong_words`): ``truncated episodes masked``, ``penalty 1 over the last 64 tokens``, both
  joined by ``; ``, or ``none``.

Numbers are written with ``:g`` (``0.01``, ``32``, ``1e-05``), so 32 and 32.0 read the same.
"""

from __future__ import annotations

import html
from types import SimpleNamespace

from agentbridge.spec.recipe import batch_words, entropy_words, grad_clip_words, lora_words
from agentbridge.spec.recipe import overlong_words as recipe_overlong_words

__all__ = ["ASPECTS", "SEPARATOR", "aspect_difference_lines", "batch_words", "differing", "entropy_words",
           "grad_clip_words", "lora_words", "overlong_words", "semantics_table", "shared"]

ASPECTS: dict[str, str] = {
    "advantage": "how a sample's advantage is computed and normalised",
    "loss aggregation": "how token losses become the batch loss",
    "clip": "the ratio clip range, and whether ratios are per token or per sequence",
    "KL": "the KL estimator, where it enters (loss or reward) and its coefficient",
    "entropy bonus": "the coefficient of the mean token entropy subtracted from the loss",
    "IS correction": "the importance-sampling correction between the engine's and the trainer's log-probs",
    "rollout mode": "synchronous, one-step off-policy or asynchronous rollouts, and the staleness allowed",
    "group filtering": "groups dropped before the update",
    "sampling": "the rollouts' sampling",
    "lengths": "the token budgets the backend enforces",
    "overlong": "what happens to episodes that run out of response tokens: masked, softly penalised",
    "optimizer": "learning rate and schedule",
    "grad clip": "the global gradient norm the actor's gradient is clipped to",
    "batch": "prompts and samples per step, and the updates over them: epochs x mini-batches",
    "LoRA": "the low-rank adapter trained (rank, alpha, target modules, dropout), or full fine-tuning",
}
SEPARATOR = " · "


def overlong_words(mask_truncated: bool, buffer: int | None = None, penalty: float = 1.0) -> str:
    """The shared words of the ``overlong`` aspect: ``truncated episodes masked; penalty 1 over the last 64
    tokens``, either part alone, or ``none``."""
    return recipe_overlong_words(SimpleNamespace(mask_truncated=mask_truncated, buffer=buffer, penalty=penalty))


def shared(value: str) -> str:
    """The part of an aspect's line that is compared: before the backend's own names."""
    return value.split(SEPARATOR, 1)[0].strip()


def differing(by_backend: dict[str, dict[str, str]]) -> list[str]:
    """The aspects on which the backends' jobs differ (in shared words), in :data:`ASPECTS` order."""
    out = []
    for aspect in ASPECTS:
        values = {shared(sem[aspect]) for sem in by_backend.values() if aspect in sem}
        if len(values) > 1:
            out.append(aspect)
    return out


def aspect_difference_lines(by_backend: dict[str, dict[str, str]]) -> list[str]:
    """One line per differing aspect: ``aspect: trl X; verl Y``."""
    return [f"{aspect}: " + "; ".join(f"{name} {shared(sem.get(aspect, '?'))}" for name, sem in by_backend.items())
            for aspect in differing(by_backend)]


def semantics_table(by_backend: dict[str, dict[str, str]]) -> str:
    """HTML: one row per aspect, one column per backend; differing rows marked ``class='differs'``, then one line
    per difference."""
    if not any(by_backend.values()):
        return ""
    names = list(by_backend)
    differs = set(differing(by_backend))
    head = "<tr><th>aspect</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names) + "</tr>"
    rows = []
    for aspect, meaning in ASPECTS.items():
        cells = "".join(f"<td>{html.escape(by_backend[n].get(aspect, '–'))}</td>" for n in names)
        mark = " class='differs'" if aspect in differs else ""
        rows.append(f"<tr{mark}><th title='{html.escape(meaning)}'>{html.escape(aspect)}</th>{cells}</tr>")
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in aspect_difference_lines(by_backend))
    summary = (f"<p>{len(differs)} aspect(s) differ:</p><ul class='semantic-differences'>{lines}</ul>" if differs
               else "<p>The jobs agree on every aspect.</p>")
    return ("<h2>What each job will do</h2><p>Read from each backend's own effective configuration; rows that "
            "differ are highlighted.</p>"
            f"<table class='semantics'>{head}{''.join(rows)}</table>{summary}")
