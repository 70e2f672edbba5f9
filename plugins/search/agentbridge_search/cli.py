"""``agentbridge-search``: print benchmark statistics, build indexes, run the retrieval server."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentbridge-search", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    world = argparse.ArgumentParser(add_help=False)
    world.add_argument("--world-seed", type=int, default=0)
    world.add_argument("--world", default="{}", help='extra build_world arguments as JSON, e.g. \'{"people": 500}\'')
    stats = sub.add_parser("stats", parents=[world], help="print the benchmark's statistics")
    stats.add_argument("--json", action="store_true")
    index = sub.add_parser("index", parents=[world], help="build and cache an index")
    index.add_argument("--retriever", choices=["bm25", "bm25s", "dense"], default="bm25")
    serve = sub.add_parser("serve", parents=[world], help="run the Search-R1 retrieval server")
    serve.add_argument("--retriever", choices=["bm25", "bm25s", "dense"], default="bm25")
    serve.add_argument("--corpus", help="serve a Search-R1 corpus JSONL instead of the generated world")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="replicas sharing the port")
    serve.add_argument("--threads", type=int, default=None,
                       help="threads per replica for dense query search (default $AGENTBRIDGE_SEARCH_THREADS or 1)")
    args = parser.parse_args(argv)
    try:
        world_args = json.loads(args.world)
        if not isinstance(world_args, dict):
            raise ValueError("--world must be a JSON object")
        if args.command == "stats":
            from agentbridge_search.data import build_world, statistics

            result = statistics(build_world(args.world_seed, **world_args))
            if args.json:
                print(json.dumps(result, indent=2))
            else:
                _print_stats(result)
        elif args.command == "index":
            from agentbridge_search.retrievers import world_retriever

            started = time.perf_counter()
            r = world_retriever(args.retriever, args.world_seed, **world_args)
            print(f"{args.retriever} index over {len(r.passages)} passages ready in "
                  f"{time.perf_counter() - started:.1f}s")
        else:
            from agentbridge_search.server import serve as run_server

            if args.workers < 1:
                raise ValueError("--workers must be at least 1")
            if args.threads is not None:
                if args.threads < 1:
                    raise ValueError("--threads must be at least 1")
                os.environ["AGENTBRIDGE_SEARCH_THREADS"] = str(args.threads)
            os.environ.update({"AGENTBRIDGE_SEARCH_RETRIEVER": args.retriever,
                               "AGENTBRIDGE_SEARCH_WORLD_SEED": str(args.world_seed),
                               "AGENTBRIDGE_SEARCH_WORLD": json.dumps(world_args)})
            if args.corpus:
                os.environ["AGENTBRIDGE_SEARCH_CORPUS"] = args.corpus
            print(f"serving {args.retriever} on http://{args.host}:{args.port}/retrieve "
                  f"({args.workers} worker(s))", file=sys.stderr)
            run_server(host=args.host, port=args.port, workers=args.workers)
    except (ValueError, TypeError, OSError, RuntimeError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


def _print_stats(s: dict) -> None:
    print(f"world seed {s['world_seed']} (key {s['world_key']})")
    print(f"passages: {s['passages']:,}  words/passage mean {s['passage_words']['mean']} "
          f"p50 {s['passage_words']['p50']} max {s['passage_words']['max']}")
    for source, n in s["passages_by_source"].items():
        print(f"  {source:<14} {n:>7,}")
    print(f"questions: {s['questions']:,}  (train {s['splits']['train']:,} / eval {s['splits']['eval']:,})")
    for kind, n in s["questions_by_kind"].items():
        print(f"  {kind:<22} {n:>7,}")
    print("  by hops: " + ", ".join(f"{h}-hop {n:,}" for h, n in s["questions_by_hops"].items()))


if __name__ == "__main__":
    sys.exit(main())
