"""``python -m agentbridge.conformance records NAME --kind K --workdir DIR``: a backend's golden records as JSON;
``... algorithms NAME --workdir DIR [--recipe CASE,...]``: its algorithm quantities on the golden batch (and those of
the recipe cases).

Run by the suite inside a backend's own environment; prints one JSON line, ``{"records": [...]}`` or
``{"error": "..."}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentbridge.conformance.golden import KINDS, enable_golden


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentbridge.conformance")
    sub = parser.add_subparsers(dest="command", required=True)
    records = sub.add_parser("records", help="print a backend's records of the golden episodes as JSON")
    records.add_argument("backend")
    records.add_argument("--kind", choices=KINDS, required=True)
    records.add_argument("--workdir", type=Path, required=True)
    algorithms = sub.add_parser("algorithms", help="print a backend's algorithm quantities on the golden batch")
    algorithms.add_argument("backend")
    algorithms.add_argument("--workdir", type=Path, required=True)
    algorithms.add_argument("--algorithms", default="")
    algorithms.add_argument("--recipe", default="", help="recipe cases (grpo, KL off) to run too, comma-separated")
    args = parser.parse_args(argv)
    enable_golden()
    from agentbridge.conformance.suite import _backend

    if args.command == "algorithms":
        from agentbridge.conformance.algorithms import ALGORITHMS, backend_probe_results

        names = tuple(a for a in args.algorithms.split(",") if a) or ALGORITHMS
        try:
            cases = tuple(c for c in args.recipe.split(",") if c)
            payload = backend_probe_results(args.backend, args.workdir, names, cases)
        except Exception as e:  # noqa: BLE001 - reported to the calling suite as one line
            payload = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        sys.stdout.write("\n" + json.dumps(payload) + "\n")
        return 0

    try:
        got = _backend(args.backend).conformance(args.kind, args.workdir)
        payload: dict[str, object] = {"records": [r.to_dict() for r in got]}
    except Exception as e:  # noqa: BLE001 - reported to the calling suite as one line
        payload = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    sys.stdout.write("\n" + json.dumps(payload) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
