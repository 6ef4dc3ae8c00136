"""The ``disthook`` command: ``demo`` and ``bench`` (more subcommands come with the service)."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from disthook.examples import tensor_hooks

    tensor_hooks.main()
    return 0


def _bench(args) -> int:
    from disthook import bench

    return bench.main(args.suite, quick=args.quick, json_path=args.json)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="disthook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the tensor-hook examples of the seed documents")
    demo.set_defaults(fn=_demo)
    bench = sub.add_parser("bench", help="benchmarks against torch (when installed)")
    bench.add_argument("suite", nargs="?", default="engine", choices=["engine"])
    bench.add_argument("--quick", action="store_true", help="fewer repeats")
    bench.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    bench.set_defaults(fn=_bench)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
