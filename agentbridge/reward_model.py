"""``core/reward_model``: a reward scored by a sequence-classification model (``AutoModelForSequenceClassification``).

The episode is shown to the model through its own chat template (``template: chat``: the episode's messages, as
reward models such as Skywork's or ArmoRM are trained) or a format string over ``{prompt}``, ``{answer}``,
``{response}`` and ``{reference}``; the score is the logit of ``label`` (optionally squashed by a sigmoid).
Episodes scored while a batch runs are gathered into the next batch, so the episodes of a step go through the model
together (at most ``batch_size`` per forward), in a worker thread: the driver's event loop keeps running.
``builtin:tiny-rm`` is a random-init tiny one for CPU tests.

Served instead of loaded (``url``, or ``serve: backend``): the texts are built here the same way and scored, in the
same batches, by a reward-model server. Two protocols, told apart by the address's path: OpenRLHF's ``/get_reward``
(``POST {"query": [text, ...]}`` answered by ``{"rewards": [score, ...]}``; OpenRLHF's own ``openrlhf.cli.serve_rm``
is one) and vLLM's ``/classify`` (``POST {"model", "input": [text, ...], "use_activation": false,
"truncate_prompt_tokens"}`` answered by ``{"data": [{"index", "probs": [logit, ...]}, ...]}``, the score being
``probs[label]``: what veRL's own reward loop asks its reward-model servers, a text at a time). With ``serve:
backend`` the compiled job serves the model with the backend's own server over ``path`` and hands its address to
the driver:
OpenRLHF's ``launch.sh`` starts ``serve_rm`` and exports ``AGENTBRIDGE_REWARD_MODEL_URL``; veRL's trainer starts
its vLLM reward-model servers behind its reward router on their own GPUs (``reward.reward_model``) and the
veRL adapter's agent loop finds the router's address and calls :func:`use_backend_server`. So the reward model runs
beside the cluster's trainer, on its own devices. A server that is down, slow or answers garbage costs those
episodes counted reward errors (after ``retries``), never the batch.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbridge.rewards import extract_answer, gold_answers

if TYPE_CHECKING:
    from agentbridge.env import Task
    from agentbridge.trajectory import Trajectory


class RewardModelArgs(BaseModel):
    """``core/reward_model``'s arguments (``reward[i].args``)."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="A local model directory (config.json) or builtin:tiny-rm")
    template: str = Field(default="chat", description="chat: the model's chat template over the episode's "
                          "messages; otherwise a format string over {prompt} {answer} {response} {reference}")
    label: int = Field(default=0, ge=0, description="Which output logit is the score")
    squash: Literal["none", "sigmoid"] = Field(default="none", description="sigmoid maps the logit to (0, 1)")
    device: str = Field(default="cpu", description="Where the model runs: cpu, cuda, cuda:1, ...")
    batch_size: int = Field(default=16, ge=1, description="Episodes per forward pass at most")
    max_length: int = Field(default=2048, ge=8, description="Tokens kept per episode (the end is kept)")
    serve: Literal["here", "backend"] = Field(
        default="here", description="here: the driver's process loads the model; backend: the compiled job serves it "
        "with the backend's own reward-model server (OpenRLHF's serve_rm, veRL's vLLM reward servers) and "
        "the driver calls it")
    url: str | None = Field(default=None, description="A /get_reward or vLLM /classify server to score with instead "
                            "of loading the model (default with serve: backend: the job's server)")
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds one request to the server may take")
    retries: int = Field(default=2, ge=0, description="Retries after a failed request to the server")


def episode_text(trajectory: Trajectory, task: Task, template: str, tokenizer: Any) -> str:
    """What the reward model reads for one episode."""
    if template == "chat":
        messages = [{"role": m["role"], "content": m.get("content") if isinstance(m.get("content"), str) else ""}
                    for m in trajectory.messages] or [{"role": "user", "content": str(task.prompt)},
                                                      {"role": "assistant", "content": trajectory.final_text}]
        return str(tokenizer.apply_chat_template(messages, tokenize=False))
    answer = extract_answer(trajectory.final_text)
    return template.format(prompt=task.prompt, answer=answer if answer is not None else "",
                           response=trajectory.final_text, reference=" | ".join(gold_answers(task)))


URL_ENV = "AGENTBRIDGE_REWARD_MODEL_URL"  # where a job that serves the reward model (serve: backend) says it is


def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    from agentbridge.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(path))
    tokenizer.truncation_side = "left"  # the end of the episode (the answer) is what is judged
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class _Batcher:
    """Scores texts in batches gathered from concurrent episodes (``score_batch`` runs in a worker thread)."""

    args: RewardModelArgs
    tokenizer: Any

    def __init__(self) -> None:
        self._pending: list[tuple[str, asyncio.Future[float]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches: list[int] = []  # size of each batch scored, for inspection

    def score_batch(self, texts: list[str]) -> list[float]:
        raise NotImplementedError

    async def score(self, text: str) -> float:
        """The score of ``text``, computed with the other episodes' texts that arrive meanwhile."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[float] = loop.create_future()
        self._pending.append((text, future))
        if self._flusher is None or self._flusher.done() or self._flusher.get_loop() is not loop:
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let the episodes finishing in this tick join the batch
        while self._pending:
            batch, self._pending = self._pending[: self.args.batch_size], self._pending[self.args.batch_size:]
            try:
                scores = await asyncio.to_thread(self.score_batch, [t for t, _ in batch])
            except Exception as e:  # noqa: BLE001 - each episode of the batch gets the error as its own
                for _, f in batch:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (_, f), s in zip(batch, scores, strict=True):
                if not f.done():
                    f.set_result(s)


class RewardModel(_Batcher):
    """One loaded reward model, scoring texts in batches gathered from concurrent episodes."""

    def __init__(self, args: RewardModelArgs) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification

        from agentbridge.models import resolve_model_path

        super().__init__()
        self.args = args
        self.tokenizer = _tokenizer(args.path)
        self.model = AutoModelForSequenceClassification.from_pretrained(resolve_model_path(args.path),
                                                                        dtype=torch.float32)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(args.device).eval()
        if args.label >= self.model.config.num_labels:
            raise ValueError(f"label {args.label}: the model has {self.model.config.num_labels} output(s)")
        self._lock = threading.Lock()

    def score_batch(self, texts: list[str]) -> list[float]:
        """The scores of ``texts`` in one forward pass (blocking)."""
        import torch

        enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                             max_length=self.args.max_length)
        with self._lock, torch.no_grad():
            logits = self.model(**{k: v.to(self.args.device) for k, v in enc.items()}).logits[:, self.args.label]
        if self.args.squash == "sigmoid":
            logits = torch.sigmoid(logits)
        self.batches.append(len(texts))
        return [float(x) for x in logits.float().cpu()]


Protocol = Literal["get_reward", "classify"]


def protocol_of(url: str) -> Protocol:
    """The protocol a server's address speaks: vLLM's ``/classify`` by its path, else OpenRLHF's ``/get_reward``."""
    from urllib.parse import urlparse

    return "classify" if urlparse(url).path.rstrip("/").endswith("/classify") else "get_reward"


class ServedRewardModel(_Batcher):
    """A reward model behind a server (``/get_reward`` or vLLM's ``/classify``): the same texts and batches, scored
    over HTTP. ``model`` is the name a ``/classify`` server serves the model under (default: ``path``)."""

    def __init__(self, args: RewardModelArgs, url: str, *, model: str | None = None) -> None:
        super().__init__()
        self.args, self.url, self.protocol = args, url, protocol_of(url)
        self.model = model or args.path
        self.tokenizer = _tokenizer(args.path) if args.template == "chat" else None

    def request(self, texts: list[str]) -> dict[str, Any]:
        """The JSON body that asks the server for the scores of ``texts``."""
        if self.protocol == "classify":  # raw logits, the end of each text kept (as the model loaded here does)
            return {"model": self.model, "input": texts, "use_activation": False,
                    "truncate_prompt_tokens": self.args.max_length}
        return {"query": texts}

    def scores(self, answer: Any, n: int) -> list[float]:
        """The ``n`` scores in the server's answer (``ValueError`` when it does not hold them)."""
        if self.protocol == "classify":
            data = sorted(answer["data"], key=lambda d: int(d["index"]))
            rewards = [d["probs"][self.args.label] for d in data]
        else:
            rewards = answer["rewards"]
        if not isinstance(rewards, list) or len(rewards) != n:
            raise ValueError(f"{len(rewards) if isinstance(rewards, list) else 'no'} rewards for {n} texts")
        return [float(r) for r in rewards]

    def score_batch(self, texts: list[str]) -> list[float]:
        """The server's scores of ``texts`` in one request (blocking; retried with backoff)."""
        import json
        import time
        import urllib.request

        body = json.dumps(self.request(texts)).encode()
        error = ""
        for attempt in range(self.args.retries + 1):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            try:
                request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=self.args.timeout_s) as response:
                    scores = self.scores(json.loads(response.read()), len(texts))
            except Exception as e:  # noqa: BLE001 - retried, then one line for the episodes of the batch
                error = f"{type(e).__name__}: {e}"
                continue
            self.batches.append(len(texts))
            if self.args.squash == "sigmoid":
                import math

                scores = [1.0 / (1.0 + math.exp(-x)) for x in scores]
            return scores
        raise RuntimeError(f"reward-model server {self.url}: {error} (after {self.args.retries} retries)")


_MODELS: dict[str, _Batcher] = {}
_LOAD_LOCK = threading.Lock()


def backend_served(spec: Any) -> list[RewardModelArgs]:
    """The spec's ``core/reward_model`` rewards the compiled job must serve (``serve: backend`` without a ``url``)."""
    out = []
    for reward in spec.reward:
        if reward.id == "core/reward_model":
            args = RewardModelArgs(**reward.args)
            if args.serve == "backend" and not args.url:
                out.append(args)
    return out


_BACKEND: dict[str, str] = {}  # the job's server as the backend's adapter found it in this process


def use_backend_server(url: str | None, *, model: str | None = None, problem: str = "") -> None:
    """Score ``serve: backend`` reward models in this process at ``url`` (served as ``model``), as the backend's
    adapter found the job's server; with no ``url``, ``problem`` says why it found none (each episode's reward
    error then says so)."""
    global _BACKEND
    _BACKEND = {"url": url, "model": model or ""} if url else {"problem": problem} if problem else {}


def served_url(args: RewardModelArgs) -> str | None:
    """The server that scores for ``args``: ``url``, or with ``serve: backend`` the job's; None to load the model."""
    import os

    if args.url:
        return args.url
    if args.serve == "backend":
        backend = _BACKEND
        url = backend.get("url") or os.environ.get(URL_ENV)
        if not url:
            raise RuntimeError(backend.get("problem") or f"serve: backend, but {URL_ENV} is not set: the compiled "
                               "job's launch script starts the backend's reward-model server and sets it (or give "
                               "args.url)")
        return url
    return None


def _load(args: RewardModelArgs, key: str) -> _Batcher:
    """The reward model of ``key``, loaded once however many episodes ask at the same time (in worker threads)."""
    with _LOAD_LOCK:
        if key not in _MODELS:
            url = served_url(args)
            backend = _BACKEND
            model = backend.get("model") if url == backend.get("url") else None
            _MODELS[key] = ServedRewardModel(args, url, model=model) if url else RewardModel(args)
        return _MODELS[key]


async def reward_model_reward(trajectory: Trajectory, task: Task, **args: Any) -> float:
    """``core/reward_model``: the reward model's score of the episode (see the module's docstring)."""
    parsed = RewardModelArgs(**args)
    key = parsed.model_dump_json(exclude={"template"}) + str(served_url(parsed))
    model = _MODELS.get(key)
    if model is None:
        model = await asyncio.to_thread(_load, parsed, key)
    return await model.score(episode_text(trajectory, task, parsed.template, model.tokenizer))


reward_model_reward.Args = RewardModelArgs  # type: ignore[attr-defined]  # what plugin_args checks args against
