"""The trajectory viewer: one self-contained ``view.html`` for a run directory, its episodes turn by turn.

A run directory holds ``episodes.jsonl`` (a training run: one row per episode with its ``step``; token lists only
for the first few episodes of each step) or ``trajectories.jsonl`` (``agentbridge rollout -o``: every episode with
its tokens). The page lists the episodes with filters (finish reason, reward range) and shows, per episode, the
reward and its components, the decoded prompt, each turn's generated text, tool calls and tool results, and the
response tokens coloured by their loss mask, each with its log-prob in its title. Plain HTML, CSS and a little
inline JavaScript; nothing is loaded from elsewhere.

Every row is checked against :class:`EpisodeRow` first: a row that is not an episode (a field of the wrong type, a
token id that is negative, fractional or past any vocabulary) is skipped with one ``path:line:`` note, a token id
past the decoding tokenizer's vocabulary is drawn as ``[id]`` with one, and the other episodes are drawn.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentbridge.runs import invalid, limit_problems, one_line, read_json_object, read_jsonl
from agentbridge.training.logger import EPISODES_WITH_TOKENS_PER_STEP

EPISODE_FILES = ("episodes.jsonl", "trajectories.jsonl")  # a training run's, a rollout's
TRAINED_COLOR = "#cfe3ff"  # loss mask 1: tokens the policy generated and is trained on
ENV_COLOR = "#e4e4e4"      # loss mask 0: tokens the environment or the chat template wrote

Decoder = Callable[[list[int]], str]


def episodes_file(run_dir: Path) -> Path:
    """The episodes file of ``run_dir``; FileNotFoundError (one line) when it has none."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a directory")
    for name in EPISODE_FILES:
        if (run_dir / name).is_file():
            return run_dir / name
    raise FileNotFoundError(f"{run_dir}: no {' or '.join(EPISODE_FILES)} (not a run directory, or no step has "
                            "finished yet)")


TokenId = Annotated[int, Field(ge=0, lt=2**31)]  # no tokenizer has more ids
MaskBit = Annotated[int, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=0)]


class _Row(BaseModel):
    """JSON types as written (no ``"1"`` for 1, no 1.0 for an id); fields it does not name pass unchecked."""

    model_config = ConfigDict(strict=True, extra="allow")


class ObservationRow(_Row):
    """A message the environment answered a turn with."""

    role: str = "?"
    name: str | None = None
    content: Any = None

    @field_validator("content")
    @classmethod
    def _text_or_blocks(cls, content: Any) -> Any:
        blocks = isinstance(content, list) and all(
            isinstance(b, dict) and isinstance(b.get("type", ""), str) and isinstance(b.get("text", ""), str)
            for b in content)
        if content is None or isinstance(content, str) or blocks:
            return content
        raise ValueError("should be text, a list of content blocks or null")


class TurnRow(_Row):
    """One assistant turn of an episode row (:class:`agentbridge.trajectory.Turn`)."""

    text: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    observations: list[ObservationRow] | None = None
    reward: float = 0.0
    scores: dict[str, float] | None = None
    credit: float = 0.0
    end: int = -1
    message_index: int = -1
    generated_tokens: Count | None = None
    observation_tokens: Count = 0
    generate_s: float = 0.0
    env_s: float = 0.0


class EpisodeRow(_Row):
    """One row of ``episodes.jsonl`` or ``trajectories.jsonl`` (``Trajectory.to_dict`` and where it ran): an
    episode has at least its task, turns, reward and finish reason."""

    step: Count | None = None
    backend: str | None = None
    time: float | None = None
    task_id: str
    prompt_ids: list[TokenId] | None = None
    response_ids: list[TokenId] | None = None
    response_mask: list[MaskBit] | None = None
    logprobs: list[float] | None = None
    images: Count | None = None
    turns: list[TurnRow]
    reward: float
    reward_components: dict[str, float] | None = None
    finish_reason: str
    metrics: dict[str, float] | None = None
    error: str | None = None


def _by_line(path: Path, problems: list[str]) -> list[str]:
    """``problems`` about ``path`` (``path:N: ...`` first) in line order."""
    def line(problem: str) -> int:
        number = problem[len(str(path)) + 1:].split(":", 1)[0]
        return int(number) if number.isdigit() else 0

    return sorted(problems, key=line)


def read_numbered_episodes(path: Path, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, episode)`` for each row of ``path`` that is an :class:`EpisodeRow`; each other line adds
    one problem line (``path:N: what is wrong; skipped``), in line order."""
    found: list[str] = []
    episodes = []
    for n, row in read_jsonl(path, found):
        try:
            EpisodeRow.model_validate(row)
        except ValidationError as e:
            found.append(f"{path}:{n}: not an episode: {invalid(e)}; skipped")
            continue
        episodes.append((n, row))
    problems += _by_line(path, found)
    return episodes


def read_episodes(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The episodes in ``path``; a line that is not one adds a problem line and is skipped."""
    return [row for _, row in read_numbered_episodes(path, problems)]


def run_model_path(run_dir: Path, problems: list[str] | None = None) -> str | None:
    """The ``model.path`` a run's tokens came from: ``spec.yaml`` in the run directory or in the job directory
    its manifest names, else the manifest's ``model``; None when the run does not say. A manifest or spec that
    cannot be read adds a problem line to ``problems``."""
    problems = [] if problems is None else problems
    manifest: dict[str, Any] = {}
    if (run_dir / "manifest.json").is_file():
        manifest = read_json_object(run_dir / "manifest.json", problems, "the run's model is not read from it") or {}
    candidates = [run_dir / "spec.yaml"]
    if isinstance(manifest.get("job"), str):
        candidates.append(Path(manifest["job"]) / "spec.yaml")
    for spec_path in candidates:
        if spec_path.is_file():
            import yaml

            try:
                spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
                first = one_line(str(e).splitlines()[0] if str(e) else type(e).__name__)
                problems.append(f"{spec_path}: cannot be read ({first}); the run's model is not read from it")
                continue
            model = spec.get("model") if isinstance(spec, dict) else None
            if isinstance(model, dict) and isinstance(model.get("path"), str):
                return str(model["path"])
    model = manifest.get("model")
    return model if isinstance(model, str) else None


class TokenDecoder:
    """Token ids to text with a model's tokenizer, special tokens included; an id outside its vocabulary is shown
    as ``[id]`` (a tokenizer would make it nothing), and so is a run of ids the tokenizer fails on."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer, self.name, self.size = tokenizer, name, len(tokenizer)

    def outside(self, ids: list[int]) -> int | None:
        """The first of ``ids`` that is not in the vocabulary, or None."""
        return next((i for i in ids if not 0 <= i < self.size), None)

    def __call__(self, ids: list[int]) -> str:
        if self.outside(ids) is None:
            return self._decode(ids)
        parts, run = [], []
        for i in ids:
            if 0 <= i < self.size:
                run.append(i)
                continue
            parts += [self._decode(run), f"[{i}]"] if run else [f"[{i}]"]
            run = []
        return "".join(parts) + (self._decode(run) if run else "")

    def _decode(self, ids: list[int]) -> str:
        try:
            return str(self.tokenizer.decode(ids, skip_special_tokens=False))
        except Exception:  # noqa: BLE001 - the ids are still worth showing
            return "".join(f"[{i}]" for i in ids)


def load_decoder(model_path: str) -> TokenDecoder:
    """Decode token ids with the tokenizer of ``model_path`` (a builtin name or a local model directory),
    special tokens included."""
    from agentbridge.models import load_tokenizer

    return TokenDecoder(load_tokenizer(model_path), model_path)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) and not isinstance(value, bool) else _e(value)


def _has_tokens(episode: dict[str, Any]) -> bool:
    return isinstance(episode.get("response_ids"), list) and isinstance(episode.get("prompt_ids"), list)


def _content_text(content: Any) -> str:
    """A message's content as text; image blocks become ``[image]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if b.get("type") == "text" else f"[{b.get('type', '?')}]"
                       for b in content if isinstance(b, dict))
    return json.dumps(content, ensure_ascii=False)


def _tool_call(call: Any) -> str:
    function = call.get("function", {}) if isinstance(call, dict) else {}
    if not isinstance(function, dict):
        return json.dumps(call, ensure_ascii=False)
    return f"{function.get('name', '?')}({json.dumps(function.get('arguments', {}), ensure_ascii=False)})"


def _turn(index: int, turn: dict[str, Any]) -> str:
    parts = [f'<li class="turn"><h4>Turn {index} <span class="dim">{_e(turn.get("generated_tokens", "?"))} '
             f'generated tokens · reward {_number(turn.get("reward", 0.0))}</span></h4>',
             f'<div class="label">generated</div><pre class="generated">{_e(turn.get("text", ""))}</pre>']
    for call in turn.get("tool_calls") or []:
        parts.append(f'<div class="label">tool call</div><pre class="tool-call">{_e(_tool_call(call))}</pre>')
    for message in turn.get("observations") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role", "?")
        label = f"tool result ({message.get('name', '?')})" if role == "tool" else f"{role} message"
        parts.append(f'<div class="label">{_e(label)}</div>'
                     f'<pre class="tool-result">{_e(_content_text(message.get("content")))}</pre>')
    return "".join(parts) + "</li>"


def _token_text(piece: str) -> str:
    return piece.replace("\n", "↵\n")  # a newline token stays visible (and coloured)


def _tokens(episode: dict[str, Any], decode: Decoder | None) -> str:
    ids, mask = episode["response_ids"], episode.get("response_mask") or []
    logprobs = episode.get("logprobs") or []
    if len(mask) != len(ids):
        return f'<p class="note">the loss mask has {len(mask)} entries for {len(ids)} tokens; not shown</p>'
    spans, pieces = [], {}  # a token's text, decoded once per id
    for i, (token, m) in enumerate(zip(ids, mask, strict=True)):
        if token not in pieces:
            pieces[token] = decode([token]) if decode else f"[{token}]"
        piece = pieces[token]
        if m:
            lp = f"log-prob {logprobs[i]:.4f}" if i < len(logprobs) else "log-prob not recorded"
            title = f"{lp} · trained on · token {token}"
        else:
            title = f"environment-written, not trained · token {token}"
        spans.append(f'<span class="tok m{1 if m else 0}" title="{_e(title)}">{_e(_token_text(piece))}</span>')
    return f'<div class="tokens">{"".join(spans)}</div>'


def _token_problem(episode: dict[str, Any], decode: TokenDecoder | None) -> str | None:
    """What keeps an episode's tokens from being drawn as recorded, or None."""
    if not _has_tokens(episode):
        return None
    ids, mask = episode["response_ids"], episode.get("response_mask") or []
    if len(mask) != len(ids):
        return f"the loss mask has {len(mask)} entries for {len(ids)} response tokens; its tokens are not shown"
    bad = decode.outside(episode["prompt_ids"] + ids) if decode else None
    if decode is None or bad is None:
        return None
    return f"token id {bad} is outside the vocabulary of {decode.name} ({decode.size} tokens); drawn as [{bad}]"


def _episode(index: int, episode: dict[str, Any], decode: Decoder | None) -> str:
    reward = episode.get("reward", 0.0)
    finish = str(episode.get("finish_reason", "?"))
    turns = episode.get("turns") or []
    step = f"step {_e(episode['step'])} · " if episode.get("step") is not None else ""
    error = episode.get("error")
    summary = (f'<span class="idx">#{index}</span> {step}<b class="task">{_e(episode.get("task_id", "?"))}</b> · '
               f'reward <span class="reward">{_number(reward)}</span> · '
               f'<span class="finish">{_e(finish)}</span> · {len(turns)} turn{"s" if len(turns) != 1 else ""}'
               + (' · <span class="err">error</span>' if error else ""))
    body = []
    components = episode.get("reward_components") or {}
    if components:
        rows = "".join(f"<tr><td>{_e(k)}</td><td>{_number(v)}</td></tr>" for k, v in components.items())
        body.append(f'<table class="components"><tr><th>reward component</th><th>value</th></tr>{rows}</table>')
    if error:
        body.append(f'<pre class="error">error: {_e(error)}</pre>')
    if episode.get("images"):
        body.append(f'<p class="dim">{_e(episode["images"])} image(s) in this episode (not shown)</p>')
    if _has_tokens(episode):
        prompt = decode(episode["prompt_ids"]) if decode else " ".join(map(str, episode["prompt_ids"]))
        body.append(f'<h4>Prompt <span class="dim">{len(episode["prompt_ids"])} tokens</span></h4>'
                    f'<pre class="prompt">{_e(prompt)}</pre>')
    else:
        body.append('<p class="note no-tokens">token lists were not kept for this episode (a training run keeps '
                    f'them for the first {EPISODES_WITH_TOKENS_PER_STEP} episodes of each step): the prompt and '
                    'the loss mask are not shown, only the turns\' text</p>')
    body.append('<ol class="turns">' + "".join(_turn(i, t) for i, t in enumerate(turns, 1) if isinstance(t, dict))
                + "</ol>")
    if _has_tokens(episode):
        body.append(f'<h4>Response tokens <span class="dim">{len(episode["response_ids"])} tokens, '
                    f'{sum(1 for m in episode.get("response_mask") or [] if m)} trained on</span></h4>')
        body.append(_tokens(episode, decode))
    reward_attr = reward if isinstance(reward, int | float) and not isinstance(reward, bool) else "nan"
    return (f'<section class="episode" data-finish="{_e(finish)}" data-reward="{_e(reward_attr)}">'
            f'<details><summary>{summary}</summary><div class="body">{"".join(body)}</div></details></section>')


STYLE = f"""
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
pre {{ white-space: pre-wrap; word-break: break-word; background: #f7f7f7; padding: .5em; margin: .2em 0 .6em; }}
.controls {{ position: sticky; top: 0; background: #fff; padding: .5em 0; border-bottom: 1px solid #ccc; }}
.controls label {{ margin-right: 1em; }}
.controls input {{ width: 6em; }}
.legend {{ margin: .5em 0; }}
.episode {{ border-bottom: 1px solid #eee; padding: .2em 0; }}
.episode summary {{ cursor: pointer; }}
.body {{ margin: .5em 0 1em 1.5em; }}
.dim {{ color: #777; font-weight: normal; font-size: .9em; }}
.label {{ font-size: .85em; color: #555; }}
.tool-call {{ background: #fff4dc; }}
.tool-result {{ background: #e9f6e9; }}
.error, .err {{ color: #b00020; }}
.note {{ color: #8a5a00; }}
.components td, .components th {{ padding: .1em .8em .1em 0; text-align: left; }}
.turns {{ padding-left: 1.2em; }}
.tokens {{ font-family: ui-monospace, monospace; font-size: .85em; white-space: pre-wrap; word-break: break-all;
          line-height: 1.6; }}
.tok {{ border-right: 1px solid #fff; }}
.tok.m1 {{ background-color: {TRAINED_COLOR}; }}
.tok.m0 {{ background-color: {ENV_COLOR}; color: #555; }}
"""

SCRIPT = """
function applyFilters() {
  const finish = document.getElementById('finish').value;
  const lo = parseFloat(document.getElementById('min-reward').value);
  const hi = parseFloat(document.getElementById('max-reward').value);
  let shown = 0;
  for (const e of document.querySelectorAll('.episode')) {
    const r = parseFloat(e.dataset.reward);
    const ok = (finish === '' || e.dataset.finish === finish) && (isNaN(lo) || r >= lo) && (isNaN(hi) || r <= hi);
    e.hidden = !ok;
    if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown;
}
for (const id of ['finish', 'min-reward', 'max-reward']) {
  document.getElementById(id).addEventListener('input', applyFilters);
  document.getElementById(id).addEventListener('change', applyFilters);
}
applyFilters();
"""


def render_view(episodes: list[dict[str, Any]], *, title: str, decode: Decoder | None,
                notes: list[str] | None = None) -> str:
    """The page for ``episodes``; ``decode`` turns token ids into text (None: ids are shown)."""
    finishes = Counter(str(e.get("finish_reason", "?")) for e in episodes)
    options = "".join(f'<option value="{_e(f)}">{_e(f)} ({n})</option>' for f, n in sorted(finishes.items()))
    without = sum(1 for e in episodes if not _has_tokens(e))
    lines = [*(notes or [])]
    if without:
        lines.append(f"{without} of {len(episodes)} episodes have no token lists: their text is shown, not their "
                     "tokens")
    note_html = "".join(f'<p class="note">{_e(line)}</p>' for line in lines)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
{note_html}
<div class="controls">
<label>finish reason <select id="finish"><option value="">all</option>{options}</select></label>
<label>reward from <input id="min-reward" type="number" step="any"></label>
<label>to <input id="max-reward" type="number" step="any"></label>
<span id="count"><span id="shown">{len(episodes)}</span> of {len(episodes)} episodes shown</span>
<div class="legend">tokens: <span class="tok m1 legend-trained">trained on (generated by the policy, loss mask 1)</span>
<span class="tok m0 legend-env">written by the environment or the chat template (loss mask 0)</span>
<span class="dim">hover a token for its log-prob</span></div>
</div>
<div id="episodes">
{"".join(_episode(i, e, decode) for i, e in enumerate(episodes, 1))}
</div>
<script>{SCRIPT}</script>
</body></html>
"""


def write_view(run_dir: Path, out: Path | None = None, *, model: str | None = None) -> tuple[Path, int, list[str]]:
    """Write the viewer page of ``run_dir`` to ``out`` (default ``RUN_DIR/view.html``).

    Tokens are decoded with ``model`` (a builtin name or local model directory), else with the run's own
    ``model.path``; without either, token ids are shown. Returns the page's path, the number of episodes and
    notes (skipped lines, a tokenizer that could not be loaded)."""
    path = episodes_file(run_dir)
    notes: list[str] = []
    numbered = read_numbered_episodes(path, notes)
    episodes = [e for _, e in numbered]
    model = model or run_model_path(run_dir, notes)
    decode: TokenDecoder | None = None
    if model is None:
        notes.append(f"{run_dir}: the run does not say which model made it: token ids are shown (pass --model to "
                     "decode them)")
    elif any(_has_tokens(e) for e in episodes):
        try:
            decode = load_decoder(model)
        except Exception as e:  # noqa: BLE001 - the page still shows the text and the token ids
            first = one_line(str(e).splitlines()[0] if str(e) else type(e).__name__, 200)
            notes.append(f"cannot load the tokenizer of {model} ({first}): token ids are shown")
    notes += [f"{path}:{n}: {problem}" for n, e in numbered if (problem := _token_problem(e, decode))]
    notes = limit_problems(notes)
    out = out or run_dir / "view.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    title = f"Episodes of {run_dir.resolve().name} ({path.name})"
    out.write_text(render_view(episodes, title=title, decode=decode, notes=notes), encoding="utf-8")
    return out, len(episodes), notes
