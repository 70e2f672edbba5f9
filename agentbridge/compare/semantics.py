"""What each backend's compiled job will actually do, side by side, read from the backend's own effective config.

Each adapter's validator fills ``Report.details["semantics"]`` (aspect -> one line) from the config the backend
itself builds (TRL's ``GRPOConfig``, veRL's composed Hydra config, OpenRLHF's parsed arguments), in shared words
first and, after `` · ``, in the backend's own names. Two backends differ on an aspect when the shared words
differ; the backends' own names are shown, never compared.
"""

from __future__ import annotations

import html

ASPECTS: dict[str, str] = {
    "advantage": "how a sample's advantage is computed and normalised",
    "loss aggregation": "how token losses become the batch loss",
    "clip": "the ratio clip range, and whether ratios are per token or per sequence",
    "KL": "the KL estimator, where it enters (loss or reward) and its coefficient",
    "IS correction": "the importance-sampling correction between the engine's and the trainer's log-probs",
    "rollout mode": "synchronous, one-step off-policy or asynchronous rollouts, and the staleness allowed",
    "group filtering": "groups dropped before the update",
    "sampling": "the rollouts' sampling",
    "lengths": "the token budgets the backend enforces",
    "optimizer": "learning rate and schedule",
    "batch": "prompts and samples per step, and updates per step",
}
SEPARATOR = " · "


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
