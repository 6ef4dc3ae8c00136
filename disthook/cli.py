"""The ``disthook`` command: run a cluster (``launch``, ``coordinator``, ``worker``), look at it
(``status``), and the ``demo`` and ``bench`` programs."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

DEFAULT_COORDINATOR = "tcp://127.0.0.1:5555"


def _demo(args) -> int:
    if args.seed_hooks:
        from disthook.examples import tensor_hooks

        tensor_hooks.main()
        return 0
    from disthook import demo

    lacking = demo.missing()
    if lacking:
        print(f"disthook demo needs {', '.join(lacking)}: {demo.INSTALL}", file=sys.stderr)
        return 2
    from disthook.demo.train import EPOCHS

    epochs = args.epochs if args.epochs is not None else 1 if args.quick else EPOCHS
    if args.workers < 2 or epochs < 1:
        print(f"disthook demo: needs --workers >= 2 (two pipeline stages) and --epochs >= 1, "
              f"got {args.workers} and {epochs}", file=sys.stderr)
        return 2
    try:
        summary = demo.run(workers=args.workers, epochs=epochs, out=args.out, quick=args.quick)
    except KeyboardInterrupt:  # the cluster was closed and its processes reaped on the way
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("\ndisthook demo: interrupted; the cluster is stopped", file=sys.stderr)
        return 130
    _print_summary(summary)
    return 0


def _print_summary(summary) -> None:
    print(f"test accuracy: {summary.test_accuracy:.1%} on {summary.test_digits} digits "
          f"after {summary.epochs} epoch(s) ({summary.seconds:.0f} s)")
    print(f"files: {summary.out / 'index.html'} ({', '.join(summary.files[:-1])} beside it)")
    print("hooks fired per worker:")
    for worker, holds, counts in summary.hooks_fired():
        fired = ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"
        print(f"  {worker} ({holds}): {fired}")


def _bench(args) -> int:
    from disthook import bench

    return bench.main(args.suite, quick=args.quick, json_path=args.json)


def _launch(args) -> int:
    from disthook.distributed import local_cluster

    scheme, _, rest = args.bind.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not host or not port.isdigit():
        print(f"disthook launch: --bind must look like tcp://127.0.0.1:5555, got {args.bind!r}",
              file=sys.stderr)
        return 2
    cluster = local_cluster(args.workers, host=host, port=int(port), heartbeat=args.heartbeat,
                            log_level=args.log_level, stderr=None,
                            allow_hook_modules=args.allow_hook_module)
    try:
        print(f"disthook cluster up: coordinator {cluster.address}, {args.workers} worker(s); "
              "Ctrl-C stops it", flush=True)
        _print_status(cluster.status())
        while True:  # watch: leave when a process dies, or on Ctrl-C
            time.sleep(0.5)
            for proc in cluster._processes:
                if proc.poll() is not None:
                    print(f"disthook launch: {' '.join(proc.args[1:3])} (pid {proc.pid}) "
                          f"exited with code {proc.returncode}; stopping the cluster",
                          file=sys.stderr)
                    return 1
    except KeyboardInterrupt:
        print("\ndisthook launch: stopping the cluster", file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the reaping
        cluster.close()


ROLES = {"coordinator": "coordinator", "worker": "workers"}


def _run_role(command: str, rest: list[str]) -> None:
    """``disthook coordinator|worker ...`` becomes ``python -m coordinator|workers ...``."""
    os.execv(sys.executable, [sys.executable, "-m", ROLES[command], *rest])


def _status(args) -> int:
    from disthook.distributed import ClusterError, connect

    try:
        cluster = connect(args.coordinator, timeout=args.timeout)
    except ClusterError as exc:
        print(f"disthook status: {exc}", file=sys.stderr)
        return 1
    with cluster:
        _print_status(cluster.status())
    return 0


def _print_status(status: dict) -> None:
    c = status["coordinator"]
    print(f"coordinator {c['address']}  pid {c['pid']}  host {c['host']}  "
          f"up {c['uptime']:.0f} s")
    print(f"{'worker':<24} {'pid':>7} {'host':<12} {'address':<24} "
          f"{'alive':>5} {'seen':>7} {'memory':>9}  stages")
    for w in status["workers"]:
        memory = f"{w['memory'] / 2**20:.0f} MiB" if w["memory"] else "?"
        stages = "; ".join(w["stages"]) or "-"
        print(f"{w['id']:<24} {w['pid']:>7} {w['host']:<12} {w['address']:<24} "
              f"{'yes' if w['alive'] else 'LOST':>5} {w['last_seen']:>6.1f}s {memory:>9}  "
              f"{stages}")


def bench_suites() -> list[str]:
    from disthook.bench import SUITES

    return sorted(SUITES)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ROLES:
        _run_role(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="disthook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a CNN on 2 workers, watched by worker hooks; "
                                       "writes plots and an index.html")
    demo.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    demo.add_argument("--epochs", type=int, default=None,
                      help="training epochs (default 12; 1 with --quick)")
    demo.add_argument("--out", default="disthook-demo", metavar="DIR",
                      help="where the figures and index.html go (default ./disthook-demo)")
    demo.add_argument("--quick", action="store_true", help="a subset of the digits, 1 epoch")
    demo.add_argument("--seed-hooks", action="store_true",
                      help="instead, run the tensor-hook examples of the seed documents")
    demo.set_defaults(fn=_demo)
    bench = sub.add_parser("bench", help="benchmarks against torch (when installed)")
    bench.add_argument("suite", nargs="?", default="all", choices=["all", *bench_suites()],
                       help="which suite (default: all)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats")
    bench.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    bench.set_defaults(fn=_bench)
    launch = sub.add_parser("launch", help="run a coordinator and N workers in the foreground")
    launch.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    launch.add_argument("--bind", default=DEFAULT_COORDINATOR,
                        help=f"the coordinator's endpoint (default {DEFAULT_COORDINATOR})")
    launch.add_argument("--heartbeat", type=float, default=0.5, help="seconds between beats")
    launch.add_argument("--log-level", default="INFO")
    launch.add_argument("--allow-hook-module", action="append", default=[], metavar="MODULE",
                        help="a module (or package) whose functions hooks.by_path may run on "
                             "the workers; repeat for more")
    launch.set_defaults(fn=_launch)
    # listed for --help; main() hands their arguments to the role's own parser
    sub.add_parser("coordinator", help="run only the coordinator (options: --help)")
    sub.add_parser("worker", help="run one worker, e.g. on another host (options: --help)")
    status = sub.add_parser("status", help="print a cluster's workers, stages and liveness")
    status.add_argument("--coordinator", default=DEFAULT_COORDINATOR,
                        help=f"the coordinator's endpoint (default {DEFAULT_COORDINATOR})")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds to wait")
    status.set_defaults(fn=_status)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
