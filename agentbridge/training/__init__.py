"""Backend-neutral training pieces every backend's job uses: held-out evaluation with paired tests, the warm start
(scripted demonstrations, SFT stopped on dev success), the per-run metrics logger and the run report.

Needs the ``hf`` extra (torch, transformers, scipy); nothing here imports a backend.
"""
