"""disthook: run a cluster (launch, coordinator, worker), serve a saved model on one
(serve), look at it (status), make its keys (keys), and run the demo and the benchmarks
(demo, bench)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time

from disthook.service.endpoint import DEFAULT_COORDINATOR, DEFAULT_PORT, parse
from disthook.service.loop import LOG_LEVELS
from disthook.wire import HEARTBEAT_S


def _demo(args) -> int:
    if args.seed_hooks:
        from disthook.demo import tensor_hooks

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
        summary = demo.run(workers=args.workers, epochs=epochs, out=args.out, quick=args.quick,
                           command=_demo_command(args, epochs))
    except KeyboardInterrupt:  # the cluster was closed and its processes reaped on the way
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the message goes out whole)
        try:
            print("\ndisthook demo: interrupted; the cluster is stopped", file=sys.stderr)
        finally:
            signal.signal(signal.SIGINT, previous)  # a program that called main() keeps Ctrl-C
        return 130
    _print_summary(summary)
    return 0


def _demo_command(args, epochs: int) -> str:
    """The command line that repeats this demo run, for its page."""
    argv = ["disthook", "demo", "--workers", str(args.workers), "--epochs", str(epochs),
            "--out", args.out] + (["--quick"] if args.quick else [])
    return shlex.join(argv)


def _print_summary(summary) -> None:
    print(f"test accuracy: {summary.test_accuracy:.1%} on {summary.test_digits} digits "
          f"after {summary.epochs} epoch(s) ({summary.seconds:.0f} s)")
    print(f"files: {summary.out / 'index.html'} ({', '.join(summary.files[:-1])} beside it)")
    print("hooks fired per worker:")
    for worker, holds, counts in summary.hooks_fired():
        fired = ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"
        print(f"  {worker} ({holds}): {fired}")


def _bench(args) -> int:
    from disthook.bench.runner import main

    return main(args.suite, quick=args.quick, json_path=args.json, plot_path=args.plot,
                stages=args.stages, width=args.width, batch=args.batch, micro=args.micro)


STARTUP_STATUS_TIMEOUT_S = 2.0  # launch's table: how long each worker may take to answer


def _launch(args) -> int:
    from disthook.distributed import local_cluster
    from disthook.service.endpoint import EndpointInUse

    if (args.hosts or args.ray is not None) and args.threads is not None:
        raise ValueError("--threads sets the threads of local workers; over ssh or Ray each "
                         "worker's come from its host (ray: the CPUs reserved for it; ssh: "
                         "set OPENBLAS_NUM_THREADS on the hosts)")
    if args.hosts:
        return _launch_ssh(args)
    if args.ray is not None:
        return _launch_ray(args)
    bind = parse(args.bind, "--bind")
    if bind.scheme != "tcp":
        raise ValueError(f"--bind must be a tcp endpoint (tcp://HOST:PORT) for launch, got "
                         f"{args.bind!r}")
    try:
        cluster = local_cluster(args.workers, host=bind.host, port=bind.port,
                                heartbeat=args.heartbeat, log_level=args.log_level, stderr=None,
                                allow_hook_modules=args.allow_hook_module, keys=args.keys,
                                restart=args.restart, threads=args.threads)
    except EndpointInUse as exc:
        print(f"disthook launch: {exc.advice('--bind')}", file=sys.stderr)
        return 1
    pids = [proc.pid for proc in cluster._processes]

    def start():
        secured = f", keys {args.keys}" if args.keys else ""
        print(f"disthook cluster up: coordinator {cluster.address}, {args.workers} worker(s)"
              f"{secured}; Ctrl-C stops it", flush=True)
        # a worker that dies meanwhile must not hold the watch on the processes for long
        _print_status(cluster.full_status(timeout=STARTUP_STATUS_TIMEOUT_S))

    def check():  # a process died: stop, unless --restart replaced it
        for i, proc in enumerate(cluster._processes):
            if proc.pid != pids[i]:  # the restarter replaced it
                print(f"disthook launch: pid {pids[i]} died; {proc.args[2]} started again "
                      f"as pid {proc.pid}", file=sys.stderr, flush=True)
                pids[i] = proc.pid
            elif proc.poll() is not None and not args.restart:
                return f"{proc.args[2]} (pid {proc.pid}) exited with code {proc.returncode}"
        return None

    return _foreground(start, check, lambda: cluster.close(reason="disthook launch stopped"))


def _packages_of(structure) -> list[str]:
    """The top-level packages of every class and function a model's structure names."""
    found: set[str] = set()

    def walk(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and key in ("class", "ref") and value.count(":") == 1:
            found.add(value.split(":")[0].split(".")[0])

    walk(structure)
    return sorted(found - {"disthook"})


def _serve(args) -> int:
    """``serve CHECKPOINT --name NAME``: a local cluster with the checkpoint's model deployed
    and published under NAME, in the foreground until Ctrl-C."""
    from disthook.distributed import checkpoint as ckpt
    from disthook.distributed import local_cluster
    from disthook.distributed.spec import main_script_of
    from disthook.service.endpoint import EndpointInUse

    bind = parse(args.bind, "--bind")
    if bind.scheme != "tcp":
        raise ValueError(f"--bind must be a tcp endpoint (tcp://HOST:PORT) for serve, got "
                         f"{args.bind!r}")
    manifest, shards = ckpt.read(args.checkpoint)
    stages = args.stages or len(manifest["stages"])
    workers = args.workers or stages
    if stages < 1 or workers < stages:
        print(f"disthook serve: needs --stages >= 1 and --workers >= --stages, got "
              f"{stages} and {workers}", file=sys.stderr)
        return 2
    if manifest.get("structure") is None:
        print(f"disthook serve: {args.checkpoint} holds a {manifest['class']} whose modules "
              "hold code (such as lambdas or bound methods), and a shared service runs no "
              "code: serve takes a model whose modules hold only data", file=sys.stderr)
        return 1
    if main_script_of(manifest["structure"]) is not None:
        print(f"disthook serve: {args.checkpoint} holds a {manifest['class']}, whose classes "
              "were defined in the script that saved it (__main__): serve makes the model "
              "from importable modules only; move the classes into a module and save again",
              file=sys.stderr)
        return 1
    # the model as saved: its classes by import path, its weights from the shards (no
    # constructor runs)
    # a shared service: no client's script runs on the workers, and classes come only
    # from disthook, the served model's packages and those --allow-model-module names (here
    # too, checked before anything is imported)
    allowed = [*_packages_of(manifest["structure"]), *args.allow_model_module]
    module = ckpt.rebuild(manifest, shards, path=args.checkpoint, allow_modules=allowed)
    try:
        cluster = local_cluster(workers, host=bind.host, port=bind.port,
                                log_level=args.log_level, stderr=None, keys=args.keys,
                                allow_hook_modules=args.allow_hook_module,
                                allow_code=False, allow_model_modules=allowed,
                                threads=args.threads)
    except EndpointInUse as exc:
        print(f"disthook serve: {exc.advice('--bind')}", file=sys.stderr)
        return 1
    pids = [proc.pid for proc in cluster._processes]
    served = []

    def start():
        served.append(cluster.deploy(module, stages, chunks=manifest["chunks"],
                                     schedule=manifest["schedule"], name=args.name,
                                     writable=args.writable))
        keys = f", keys={args.keys!r}" if args.keys else ""
        access = "writable by attached clients" if args.writable else "read-only"
        print(f"disthook serve: {manifest['class']} from {args.checkpoint} on {stages} "
              f"stage(s) of {workers} worker(s), published as {args.name!r} ({access}); "
              f"attach with connect({cluster.address!r}{keys}).attach({args.name!r}); "
              "Ctrl-C stops it", flush=True)

    def check():
        return next((f"{proc.args[2]} (pid {pid}) exited with code {proc.returncode}"
                     for pid, proc in zip(pids, cluster._processes) if proc.poll() is not None),
                    None)

    def stop():
        for remote in served:
            remote.close()
        cluster.close(reason="disthook serve stopped")

    return _foreground(start, check, stop, command="serve")


def _foreground(start, check, stop, every: float = 0.5, command: str = "launch") -> int:
    """Run a launched cluster in the foreground: ``start()``, then ``check()`` every
    ``every`` seconds until it names a process that ended (exit 1) or Ctrl-C (exit 0);
    ``stop()`` in every case, safe from a second Ctrl-C."""
    try:
        start()
        while True:
            time.sleep(every)
            ended = check()
            if ended:
                print(f"disthook {command}: {ended}; stopping the cluster", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        print(f"\ndisthook {command}: stopping the cluster", file=sys.stderr)
        return 0
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not
        try:  # cut the reaping
            stop()
        finally:
            signal.signal(signal.SIGINT, previous)  # a program that called main() keeps Ctrl-C


def _port_of(bind: str) -> int:
    """The port of ``--bind`` for launchers on other hosts (0 there: the default port)."""
    return parse(bind, "--bind").port or DEFAULT_PORT


def _launch_ssh(args) -> int:
    """``launch --hosts FILE``: every process under ssh; Ctrl-C hangs them all up."""
    import subprocess

    from deploy import ssh

    try:
        with open(args.hosts) as f:
            hosts = ssh.parse_hosts(f.read(), args.hosts)
    except (OSError, ValueError) as exc:
        print(f"disthook launch: {exc}", file=sys.stderr)
        return 2
    plan = ssh.commands(hosts, port=_port_of(args.bind), keys=args.keys,
                        heartbeat=args.heartbeat, log_level=args.log_level)
    if args.dry_run:
        for what, argv in plan:
            print(f"# {what}\n{shlex.join(argv)}")
        return 0
    procs = []

    def start():
        for what, argv in plan:
            procs.append((what, subprocess.Popen(argv, stdin=subprocess.DEVNULL)))
            if not procs[1:]:
                time.sleep(1.0)  # the coordinator first
        print(f"disthook cluster up over ssh: {len(plan) - 1} worker(s); Ctrl-C stops it",
              flush=True)

    def check():
        return next((f"the {what} ended with code {proc.returncode}" for what, proc in procs
                     if proc.poll() is not None), None)

    def stop():
        for _, proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    return _foreground(start, check, stop)


def _launch_ray(args) -> int:
    """``launch --ray [ADDRESS]``: the processes started by Ray actors."""
    from deploy import ray_launcher

    try:
        cluster = ray_launcher.launch(args.workers, address=args.ray or None,
                                      port=_port_of(args.bind), keys=args.keys,
                                      heartbeat=args.heartbeat, log_level=args.log_level)
    except ImportError as exc:
        print(f"disthook launch: {exc}", file=sys.stderr)
        return 2
    return _foreground(
        lambda: print(f"disthook cluster up on Ray: coordinator {cluster.address}, "
                      f"{args.workers} worker(s); Ctrl-C stops it", flush=True),
        lambda: None if all(cluster.running()) else "a process ended",
        cluster.stop, every=1.0)


def _at_least_one(text: str) -> int:
    """An option's count (``--workers``, ``--stages``): a whole number >= 1, as typed."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


ROLES = {"coordinator": "coordinator", "worker": "workers"}


def _run_role(command: str, rest: list[str]) -> None:
    """``disthook coordinator|worker ...`` runs ``python -m coordinator|workers ...`` from this
    installed project, whatever the working directory holds."""
    from deploy.roles import Role

    os.execv(sys.executable, Role(ROLES[command], tuple(rest)).local_argv(sys.executable))


def _status(args) -> int:
    from disthook.distributed import ClusterError, connect
    from disthook.distributed.cluster import CoordinatorUnreachable

    try:
        parse(args.coordinator, "--coordinator")  # the option's name in the error, not connect's
        cluster = connect(args.coordinator, timeout=args.timeout, keys=args.keys,
                          key_name=args.key_name)
    except CoordinatorUnreachable as exc:  # the hint as this command takes it
        print(f"disthook status: {exc.advice('--keys DIR')}", file=sys.stderr)
        return 1
    except (ClusterError, OSError, ValueError) as exc:  # refused keys, bad key files, address
        print(f"disthook status: {exc}", file=sys.stderr)
        return 1
    with cluster:
        if args.watch:
            return _watch(cluster, args.every, as_json=args.json)
        if args.json:
            print(json.dumps(cluster.full_status(), indent=2))
        else:
            _print_status(cluster.full_status())
    return 0


def _watch(cluster, every: float, *, as_json: bool = False, stream=None) -> int:
    """``status --watch``: the table again every ``every`` seconds (redrawn in place on a
    terminal, blocks apart otherwise; with ``--json`` one document per line) until Ctrl-C,
    with each worker's calls per second since the last refresh."""
    from disthook.distributed import ClusterError

    stream = sys.stdout if stream is None else stream
    redraw = stream.isatty() and not as_json
    seen: dict[str, tuple[float, int]] = {}  # worker id -> (when, messages decoded then)
    try:
        while True:
            try:
                status = cluster.full_status()
            except (ClusterError, OSError) as exc:
                print(f"disthook status: the coordinator stopped answering: {exc}",
                      file=sys.stderr)
                return 1
            rates = _call_rates(status, seen, time.monotonic())
            if as_json:
                for w in status["workers"]:
                    w["calls_per_s"] = rates.get(w["id"])
                print(json.dumps(status), file=stream, flush=True)
            else:
                if redraw:
                    stream.write("\x1b[H\x1b[2J")  # home, clear: the table stays in place
                _print_status(status, rates=rates, columns=WATCH_COLUMNS, stream=stream,
                              note=f"every {every:g} s; Ctrl-C stops")
                if not redraw:
                    print(file=stream)
                stream.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return 0


def _call_rates(status: dict, seen: dict, now: float) -> dict[str, float]:
    """Messages each worker decoded per second since it was last ``seen`` (updated), not
    counting the status request that asked."""
    rates = {}
    for w in status["workers"]:
        count = (w.get("own") or {}).get("messages")
        if count is None:
            continue
        if w["id"] in seen:
            then, before = seen[w["id"]]
            # less this command's own status request to it
            rates[w["id"]] = max(count - before - 1, 0) / max(now - then, 1e-9)
        seen[w["id"]] = (now, count)
    return rates


STATUS_COLUMNS = ("worker", "address", "alive", "beat", "memory", "graphs", "kept",
                  "peer-out", "stage", "neighbours", "modules", "params")
WATCH_COLUMNS = ("worker", "alive", "beat", "memory", "graphs", "waits", "queued", "calls/s",
                 "kept", "peer-out", "stage", "neighbours", "modules", "params")
LEFT_ALIGNED = {"worker", "address", "stage", "neighbours", "modules"}


def _print_status(status: dict, *, rates: dict | None = None,
                  columns: tuple = STATUS_COLUMNS, stream=None, note: str = "") -> None:
    """The coordinator, then a row per worker and stage it holds (``full_status()``'s
    document): liveness, last heartbeat, memory, open forward graphs, requests waiting on a
    hook or a neighbour and queued, calls per second (``rates``), values kept for clients,
    bytes sent to other workers, the stage's modules and parameter count. Each column is as wide as its widest cell; "?" where a worker did not
    say."""
    c = status["coordinator"]
    print(f"coordinator {c['address']}  pid {c['pid']}  host {c['host']}  "
          f"up {c['uptime']:.0f} s" + (f"  ({note})" if note else ""), file=stream)
    rows = [row for w in status["workers"] for row in _worker_rows(w, (rates or {}).get(w["id"]))]
    for line in _table(columns, rows):
        print(line, file=stream)


def _worker_rows(w: dict, rate: float | None) -> list[dict]:
    """A worker's cells: one row per stage it holds (the worker's own cells on the first)."""
    own = w.get("own") or {}
    memory = own.get("memory") or w.get("memory")
    cells = {"worker": w["id"], "address": w["address"],
             "alive": "yes" if w["alive"] else "LOST", "beat": f"{w['last_seen']:.1f}s",
             "memory": f"{memory / 2**20:.0f} MiB" if memory else "?",
             "graphs": str(own.get("contexts", "?")), "waits": str(own.get("waits", "?")),
             "queued": str(own.get("queued", "?")),
             "calls/s": "?" if rate is None else f"{rate:.1f}",
             # values kept for clients, and what went to other workers (all models)
             "kept": str(own.get("values", "?")),
             "peer-out": "?" if "data" not in own else _mib(
                 sum(c.get("bytes_to_peers", 0) for c in own["data"].values()))}
    if not w["stages"]:
        return [{**cells, "stage": "-", "neighbours": "", "modules": "", "params": ""}]
    rows = []
    for name in w["stages"]:
        stats = own.get("stage_stats", {}).get(name, {})
        rows.append({**(cells if not rows else dict.fromkeys(cells, "")), "stage": name,
                     "neighbours": _neighbours(own, name),
                     "modules": ",".join(stats.get("modules", [])) or "?",
                     "params": str(stats.get("parameters", "?"))})
    return rows


def _neighbours(own: dict, stage: str) -> str:
    """How a stage reaches its neighbours: ``prev:local,next:zeromq`` (a local link is a Unix
    socket between workers on one host), ``-`` for none, ``?`` where the worker did not say."""
    links = (own.get("links") or {}).get("stages")
    if links is None:
        return "?"
    sides = links.get(stage) or {}
    return ",".join(f"{side}:{how}" for side, how in sorted(sides.items(), reverse=True)) or "-"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}MiB"


def _table(columns: tuple, rows: list[dict]) -> list[str]:
    """A header and the rows, two spaces between columns sized to their content, each cell
    printable (a model's id, its modules' names are its client's choice)."""
    from disthook.service.loop import printable

    rows = [{c: printable(row[c]) for c in columns} for row in rows]
    widths = {c: max([len(c), *(len(row[c]) for row in rows)]) for c in columns}

    def line(cells: dict) -> str:
        return "  ".join(cells[c].ljust(widths[c]) if c in LEFT_ALIGNED
                         else cells[c].rjust(widths[c]) for c in columns).rstrip()

    return [line({c: c for c in columns}), *(line(row) for row in rows)]


def _keys(args) -> int:
    from disthook.service import security

    try:
        if args.action == "generate":
            keys = security.generate(args.dir)
            print(f"keys made in {args.dir}: server.key(_secret) for the coordinator and "
                  f"workers, client.key(_secret) for a client (public key "
                  f"{keys.fingerprint}...); start every process with --keys {args.dir}, and "
                  "copy the directory to each host (the *_secret files are secrets)")
        else:
            secret = security.add_client(args.dir, args.name)
            print(f"client key {args.name!r} made and authorized: {secret}; connect with "
                  f"connect(address, keys={args.dir!r}, key_name={args.name!r})")
    except (OSError, ValueError) as exc:
        print(f"disthook keys: {exc}", file=sys.stderr)
        return 1
    return 0


def _seconds(text: str) -> float:
    """A time-out given on the command line: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {text}")
    return value


def bench_suites() -> list[str]:
    from disthook.bench import SUITES

    return sorted(SUITES)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ROLES:
        _run_role(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `disthook status --json | head -1`: the reader has what it wanted
        _quiet_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line; --debug for the traceback
        if args.debug:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"disthook {args.command}: {type(exc).__name__}: {first} (--debug shows the "
              "traceback)", file=sys.stderr)
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is left for a
    reader that went away does not fail again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _worker_options(parser: argparse.ArgumentParser, *, log_level: str) -> None:
    """The options of the processes a command starts here (launch, serve)."""
    parser.add_argument("--log-level", default=log_level, type=str.upper, choices=LOG_LEVELS,
                        help="the least severe messages the processes log to this terminal "
                             f"(default {log_level})")
    parser.add_argument("--allow-hook-module", action="append", default=[], metavar="MODULE",
                        help="a module (or package) whose functions hooks.by_path may run on "
                             "the workers; repeat for more")
    parser.add_argument("--threads", type=_threads_arg, metavar="share|N",
                        help="each worker's BLAS and OpenMP threads: 'share' (its share of "
                             "this machine's cores, the fast choice with several workers) or "
                             "a count (default: the environment's, as this process has them: "
                             "the same rounding as one process)")


def _threads_arg(text: str):
    if text == "share":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected 'share' or a whole number >= 1, got "
                                         f"{text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command but the roles (which parse their own arguments)."""
    parser = argparse.ArgumentParser(
        prog="disthook", description=__doc__,
        epilog="Each command has its own --help. disthook coordinator|worker --help lists "
               "the options of those roles.")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the traceback instead of one line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a CNN on 2 workers, watched by worker hooks; "
                                       "writes plots and an index.html")
    demo.add_argument("--workers", type=_at_least_one, default=2, help="how many workers (default 2)")
    demo.add_argument("--epochs", type=int, default=None,
                      help="training epochs (default 12; 1 with --quick)")
    demo.add_argument("--out", default="disthook-demo", metavar="DIR",
                      help="where the figures and index.html go (default ./disthook-demo)")
    demo.add_argument("--quick", action="store_true", help="a subset of the digits, 1 epoch")
    demo.add_argument("--seed-hooks", action="store_true",
                      help="instead, run the tensor-hook examples of the seed documents")
    demo.set_defaults(fn=_demo)
    bench = sub.add_parser("bench", help="benchmarks: ratios against torch, raw pyzmq, one "
                                         "process and torch's distributed tools")
    bench.add_argument("suite", nargs="?", default="all", choices=["all", *bench_suites()],
                       help="which suite (default: all)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats")
    bench.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    bench.add_argument("--plot", metavar="PNG",
                       help="also draw pipeline throughput against micro-batches beside the "
                            "ideal (suite pipeline), speedup against stages beside the bound "
                            "and torch pipelining (suites scaleout and workspan: measured "
                            "where each worker had a core, predicted from work and span "
                            "where not; with all, a second file NAME-scaleout.png); needs "
                            "matplotlib")
    from disthook.bench.runner import stages_list

    bench.add_argument("--stages", type=stages_list, metavar="P,P,...",
                       help="stage counts, one worker process per stage (suites scaleout and "
                            "workspan: default 2,4,8, 2,4 with --quick; peers: default 2)")
    bench.add_argument("--width", type=int, metavar="N",
                       help="scaleout, workspan: the Linear layers' width (default 1024, 256 "
                            "with --quick; workspan: 1024 and 512)")
    bench.add_argument("--batch", type=int, metavar="N",
                       help="scaleout, workspan: rows per step (default 512)")
    bench.add_argument("--micro", type=int, metavar="M",
                       help="scaleout, workspan: micro-batches per step (default 16)")
    bench.set_defaults(fn=_bench)
    launch = sub.add_parser("launch", help="run a coordinator and N workers in the foreground")
    launch.add_argument("--workers", type=_at_least_one, default=2, help="how many workers (default 2)")
    launch.add_argument("--bind", default=DEFAULT_COORDINATOR,
                        help=f"the coordinator's endpoint (default {DEFAULT_COORDINATOR})")
    launch.add_argument("--heartbeat", type=float, default=HEARTBEAT_S,
                        help=f"seconds between beats (default {HEARTBEAT_S})")
    _worker_options(launch, log_level="INFO")
    launch.add_argument("--hosts", metavar="FILE",
                        help="run the processes over ssh on the hosts FILE lists (see "
                             "deploy/ssh.py for its format); --bind gives the port")
    launch.add_argument("--dry-run", action="store_true",
                        help="with --hosts: print the ssh commands instead of running them")
    launch.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="start the processes as Ray actors on the Ray cluster at "
                             "ADDRESS (default: this machine's); needs disthook[ray]")
    launch.add_argument("--restart", action="store_true",
                        help="replace a process that dies (a worker by a new worker, the "
                             "coordinator on the same address) instead of stopping")
    launch.add_argument("--keys", metavar="DIR",
                        help="run with keys from DIR (disthook keys generate DIR): every "
                             "connection encrypted, only authorized peers accepted")
    launch.set_defaults(fn=_launch)
    serve = sub.add_parser("serve", help="run a cluster with a saved model deployed and "
                                         "published by name, in the foreground")
    serve.add_argument("checkpoint", metavar="CHECKPOINT",
                       help="a checkpoint directory written by remote.save(path)")
    serve.add_argument("--name", required=True,
                       help="the name clients attach to: connect(address).attach(NAME)")
    serve.add_argument("--stages", type=_at_least_one, default=None,
                       help="how many stages to place it on (default: as it was saved)")
    serve.add_argument("--workers", type=_at_least_one, default=None,
                       help="how many workers (default: one per stage)")
    serve.add_argument("--bind", default=DEFAULT_COORDINATOR,
                       help=f"the coordinator's endpoint (default {DEFAULT_COORDINATOR}; "
                            "tcp://127.0.0.1:0 picks a free port)")
    serve.add_argument("--keys", metavar="DIR",
                       help="run with keys from DIR (disthook keys generate DIR); attaching "
                            "clients connect with a pair of DIR (disthook keys add DIR NAME)")
    serve.add_argument("--writable", action="store_true",
                       help="let attached clients write the weights (default: read-only)")
    serve.add_argument("--allow-model-module", action="append", default=[], metavar="MODULE",
                       help="a module (or package) whose classes the workers may take besides "
                            "disthook and the served model's own (an optimizer class of a "
                            "client that may write, say); repeat for more")
    _worker_options(serve, log_level="WARNING")
    serve.set_defaults(fn=_serve)
    # listed for --help; main() hands their arguments to the role's own parser
    sub.add_parser("coordinator", help="run only the coordinator (options: --help)")
    sub.add_parser("worker", help="run one worker, e.g. on another host (options: --help)")
    status = sub.add_parser("status", help="print a cluster's workers, stages and liveness")
    status.add_argument("--coordinator", default=DEFAULT_COORDINATOR,
                        help=f"the coordinator's endpoint (default {DEFAULT_COORDINATOR})")
    status.add_argument("--timeout", type=_seconds, default=5.0,
                        help="seconds to wait for the coordinator's answer (default 5)")
    status.add_argument("--keys", metavar="DIR", help="the cluster's key directory")
    status.add_argument("--key-name", default="client",
                        help="which client pair of DIR to use (default client)")
    status.add_argument("--json", action="store_true",
                        help="print the coordinator's and every worker's own status as one "
                             "JSON document (with --watch: one document per line)")
    status.add_argument("--watch", action="store_true",
                        help="refresh until Ctrl-C: workers, stages, open graphs, memory, "
                             "calls per second, requests waiting on hooks and queued")
    status.add_argument("--every", type=_seconds, default=1.0, metavar="SECONDS",
                        help="with --watch: seconds between refreshes (default 1)")
    status.set_defaults(fn=_status)
    keys = sub.add_parser("keys", help="make the key directory of a cluster that uses keys")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    generate = keys_sub.add_parser("generate", help="a new key directory: the servers' pair, "
                                                     "a client's pair, both authorized")
    generate.add_argument("dir")
    add = keys_sub.add_parser("add", help="one more client pair in DIR, authorized")
    add.add_argument("dir")
    add.add_argument("name", help="the pair's name (a plain word)")
    keys.set_defaults(fn=_keys)
    return parser


if __name__ == "__main__":
    sys.exit(main())
