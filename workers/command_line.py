"""The worker's command line (``python -m workers``, ``disthook worker``): its options,
checked and turned into a ``Worker`` (``workers/server.py``), which then serves until it
stops; a bad option or address is said in one line, with exit status 1."""
from __future__ import annotations

from deploy.threads import blas_threads
from disthook.service import endpoint, worker_hooks
from disthook.service.loop import LOG_LEVELS, log_to_stderr, tune_malloc
from disthook.service.security import SERVER, Keys
from workers.limits import add_limit_options, limit_arguments
from workers.server import Worker

__all__ = ["main"]


def _positive_int(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads >= 1, got "
                                         f"{text!r}")
    return int(text)


def main(argv=None) -> int:
    import argparse
    import logging
    import sys

    p = argparse.ArgumentParser(prog="disthook worker",
                                description="Run one worker of a disthook cluster.")
    p.add_argument("--coordinator", required=True, help="the coordinator's endpoint")
    p.add_argument("--bind", default="tcp://127.0.0.1:0",
                   help="endpoint for the data plane; port 0 picks a free one "
                        "(default tcp://127.0.0.1:0, loopback only)")
    p.add_argument("--advertise", metavar="HOST[:PORT]",
                   help="the address peers and clients reach this worker at, when it binds "
                        "a wildcard or sits behind NAT (default: the bound address)")
    p.add_argument("--id", dest="worker_id", help="worker id (default host-pid)")
    p.add_argument("--orphan-after", type=float, default=0.0,
                   help="stop after this many seconds without word from the coordinator "
                        "(default 0: never; the worker keeps its stages and waits for a "
                        "coordinator on the same address)")
    p.add_argument("--context-ttl", type=float, default=600.0,
                   help="drop a forward's graph kept for a backward that has not come in "
                        "this many seconds (a client that vanished; default 600)")
    add_limit_options(p)  # --max-contexts, --max-hooks, --max-...-mb (limits.py)
    p.add_argument("--threads", type=_positive_int, metavar="N",
                   help="threads this worker's arithmetic uses (BLAS, OpenMP), set before "
                        "numpy loads (default: the environment's OMP_NUM_THREADS, "
                        "OPENBLAS_NUM_THREADS..., else every core; local_cluster gives each "
                        "worker its share of the cores)")
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    p.add_argument("--allow-hook-module", action="append", default=[], metavar="MODULE",
                   help="a module (or package) whose functions hooks.by_path may run here; "
                        "repeat for more")
    p.add_argument("--allow-model-module", action="append", default=None, metavar="MODULE",
                   help="take models' classes (and optimizers') only from disthook and this "
                        "module or package; repeat for more (default: any installed module; "
                        "a shared service should list its own)")
    p.add_argument("--allow-code", "--allow-main-scripts", dest="allow_code",
                   action="store_true",
                   help="take models pickled by value, their code included, from the clients "
                        "that deploy them (local clusters and launch do; a shared service "
                        "does not: its models come as data, classes from installed modules)")
    p.add_argument("--keys", metavar="DIR",
                   help="key directory (disthook keys generate DIR): encrypt every connection "
                        "and accept only the peers it authorizes")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="the least severe messages logged to stderr (default INFO)")
    args = p.parse_args(argv)
    log_to_stderr(args.log_level)
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: stacks
    if args.threads is not None and blas_threads() != args.threads:
        logging.getLogger(__name__).warning(
            "--threads %d came after numpy loaded, which keeps its own count: start the "
            "worker with python -m workers (or disthook worker) for it to apply", args.threads)
    if not tune_malloc():
        logging.getLogger(__name__).info("malloc not tuned (not glibc)")
    try:
        keys = Keys.load(args.keys, SERVER) if args.keys else None
        coordinator = str(endpoint.parse(args.coordinator, "--coordinator"))
        endpoint.parse(args.bind, "--bind")
        worker_hooks.check_importable(args.allow_hook_module, "--allow-hook-module")
        worker = Worker(coordinator, bind=args.bind, worker_id=args.worker_id,
                        orphan_after=args.orphan_after or None, parent_pid=args.parent_pid,
                        context_ttl=args.context_ttl, advertise=args.advertise,
                        allow_hook_modules=tuple(args.allow_hook_module),
                        allow_code=args.allow_code, keys=keys,
                        allow_model_modules=args.allow_model_module,
                        **limit_arguments(args))
    except endpoint.EndpointInUse as exc:
        print(f"disthook worker: {exc.advice('--bind')}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # a bad address, unreadable key files
        print(f"disthook worker: {exc}", file=sys.stderr)
        return 1
    from disthook.distributed import cluster

    cluster.IN_WORKER = True  # a client script imported here must not start clusters
    print(f"disthook worker {worker.id} serving on {worker.address}", flush=True)
    worker.serve_forever()
    return 0
