import atexit
import gc
import importlib.util
import os
import re
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import rewrite_cache

BYTECODE_DIR_PREFIX = "disthook-test-bytecode-"
BYTECODE_DIR_VARIABLE = "DISTHOOK_TEST_BYTECODE_DIR"  # the run's directory, named for its workers


def _keep_bytecode_for_this_run() -> None:
    """Where the environment turns bytecode files off (PYTHONDONTWRITEBYTECODE), every
    process this run starts (each coordinator and worker of a cluster) compiled disthook from
    source again: about 0.6 s of CPU per process. This run keeps their bytecode in a
    directory of its own, outside the source tree (PYTHONPYCACHEPREFIX, which the processes
    started from here inherit), removed at the end, so that no file is left beside the
    sources, as the setting asks.

    The pytest processes themselves (this one and the xdist workers) do not use it: a prefix
    is global, and under one Python looks for no bytecode beside any source, so they would
    compile torch and numpy from source too (about 10 s of CPU per process that imports
    torch and runs its optimizers) instead of reading the bytecode installed with them."""
    ours = os.environ.get(BYTECODE_DIR_VARIABLE)
    if ours and sys.pycache_prefix == ours:  # an xdist worker, started with the run's setting
        sys.pycache_prefix = None
        sys.dont_write_bytecode = True
        return
    if not sys.flags.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # bytecode is kept as usual, or somewhere the user chose
    made = tempfile.mkdtemp(prefix=BYTECODE_DIR_PREFIX)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = made
    os.environ[BYTECODE_DIR_VARIABLE] = made
    atexit.register(shutil.rmtree, made, True)


_keep_bytecode_for_this_run()  # at import: before xdist starts its workers


THREAD_VARIABLES_SET_BY_THE_RUN = "DISTHOOK_TEST_SET_THREADS"  # "1" where this run set them


def _one_thread_for_this_run() -> None:
    """Where the environment sets no thread count, every process of the run computes on one
    thread: BLAS and OpenMP read these variables when they load, and the pytest processes,
    the coordinators and workers, the CLI and the programs the tests start all inherit them
    (as ``python -m workers --threads 1`` would set them). The tests compute on tiny arrays,
    where a second thread only spins waiting for work, on cores the other processes need
    (unit and integration files under -n 3: 72-78 -> 62-67 CPU-s). Every process
    gets the same count, so that the client and its workers round alike, as by default. A
    count the environment sets is kept, for every process."""
    from deploy.threads import THREAD_VARS

    if os.environ.get(THREAD_VARIABLES_SET_BY_THE_RUN) or any(
            os.environ.get(var) for var in THREAD_VARS):
        return  # set by the run already (an xdist worker), or by the user
    os.environ.update(dict.fromkeys(THREAD_VARS, "1"))
    os.environ[THREAD_VARIABLES_SET_BY_THE_RUN] = "1"


_one_thread_for_this_run()  # at import: before numpy loads here and before xdist starts


def _torch_on_one_thread_here() -> None:
    """Once a test module has imported torch, torch computes on one thread in the tests'
    own process (its intra-op threads, OpenMP and MKL). Its reference values are computed
    on tiny tensors, where a second thread only waits for work, and an idle OpenMP thread
    spins before it sleeps: with as many pytest processes as cores (plus one) beside the
    roles they start, that spinning took cores from the others (the losses, attention and
    parity files under -n 3: 67-69 -> 43 CPU-s with numpy's BLAS limited too, most of it
    torch's). numpy's BLAS keeps the environment's setting, as in the workers the tests
    start: a deployed model's results are compared with this process's to the last bits
    (after a few AdamW steps, BLAS on one thread here and two there differed by 1e-3)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


_TORCH_SEEN = ["torch" in sys.modules]
_torch_on_one_thread_here()


def pytest_runtest_setup(item):
    if not _TORCH_SEEN[0] and "torch" in sys.modules:  # imported since this process began
        _TORCH_SEEN[0] = True
        _torch_on_one_thread_here()


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    """An xdist worker of a run that keeps its bytecode in a directory of its own shares
    pytest's rewritten test modules with the other workers there (tests/rewrite_cache.py):
    each module rewritten about once per run, not once per worker."""
    ours = os.environ.get(BYTECODE_DIR_VARIABLE)
    if ours and os.path.isdir(ours):
        rewrite_cache.share_in_this_worker(session.config, Path(ours))


@pytest.fixture
def bytecode_as_the_environment_sets_it(monkeypatch):
    """The processes the test starts get the environment's own bytecode setting, not the
    run's directory: for a process that imports torch (a pytest run inside a test, torch's
    fork server), as for the pytest processes themselves, the prefix would mean compiling
    torch, numpy and pytest from source (about 10 s of CPU more per process)."""
    ours = os.environ.get(BYTECODE_DIR_VARIABLE)
    if ours and os.environ.get("PYTHONPYCACHEPREFIX") == ours:  # the run set it
        monkeypatch.delenv("PYTHONPYCACHEPREFIX")
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as the environment had it


def _let_ctrl_c_reach_the_processes_started_here() -> None:
    """A shell runs a command put in the background (``pytest ... &``) with SIGINT ignored,
    and every process started from it inherits that: the CLI, the demo and ``serve`` then
    never see the Ctrl-C the tests send them, and those tests time out. SIGINT handled
    here again means the processes started from here start with its default."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_let_ctrl_c_reach_the_processes_started_here()


@pytest.fixture(scope="module", autouse=True)
def _older_objects_left_out_of_collections():
    """Each test module starts with every object alive at that point moved out of the
    garbage collector's sight (``gc.freeze``), after one collection of what the modules
    before left. A full collection walks every tracked object of the process: in an xdist
    worker that has run a few dozen modules (torch, matplotlib and their graphs imported)
    that is seconds of CPU per ``gc.collect()``, and the tests that prove an object dies
    call it several times. What a test makes is still collected as before; only the objects
    of earlier modules that are already alive (imports, fixtures, caches) are not walked
    again."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _fresh_grad_mode():
    """Every test starts with grad mode on and leaves it so."""
    from disthook.autograd import grad_mode

    grad_mode._state.enabled = True
    yield
    grad_mode._state.enabled = True


@pytest.fixture(autouse=True)
def _distribution_checks_restored():
    """Every test ends with the distributions' default argument checks as it found them,
    disthook's and (once imported) torch's: the first ``compile()`` of a process turns them
    off, as torch's does."""
    from disthook.distributions import Distribution

    def torchs():
        torch = sys.modules.get("torch")
        return None if torch is None else torch.distributions.Distribution

    before = Distribution._validate_args
    theirs = torchs()
    theirs_before = True if theirs is None else theirs._validate_args  # (torch's default)
    yield
    Distribution._validate_args = before
    if torchs() is not None:  # (also when this test imported it)
        torchs()._validate_args = theirs_before


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


PARITY_HINT = "pip install -e '.[parity]' installs torch 2.13.0 and runs them"
TORCH_MISSING = ("torch is not installed", "could not import 'torch'")
HAS_TORCH = importlib.util.find_spec("torch") is not None
# a test module that skips itself at import when torch is missing
IMPORTS_TORCH_OR_SKIPS = re.compile(r"^(?:\w+\s*=\s*)?pytest\.importorskip\(\s*[\"']torch[\"']",
                                    re.MULTILINE)


def _say_how_to_run(report) -> None:
    """A test skipped for want of torch (a skipif or an importorskip) says how to run it,
    in one wording for all."""
    if report.skipped and isinstance(report.longrepr, tuple):
        path, line, reason = report.longrepr
        if any(text in reason for text in TORCH_MISSING):
            report.longrepr = (path, line, f"torch is not installed: {PARITY_HINT}")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one xdist worker more than the cores this run may use. Part of the
    suite waits on the coordinators and workers its tests start; a third worker on 2 cores
    fills those waits (the whole suite, quiet: 271 s with 2 workers, 256 s with 3).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where it is set."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this system
        cores = os.cpu_count() or 1
    return cores + 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _say_how_to_run((yield).get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # a module named on the command line, skipped
    _say_how_to_run((yield).get_result())


def _needs_torch_to_import(path: Path) -> bool:
    return (path.suffix == ".py" and path.name.startswith("test_")
            and IMPORTS_TORCH_OR_SKIPS.search(path.read_text(encoding="utf-8")) is not None)


def pytest_ignore_collect(collection_path: Path, config):
    """Without torch, a module that would skip itself whole at import is not collected:
    such a skip is one result for no collected test, so pytest's final count exceeded the
    collected count by one per module. The end of the run names them instead."""
    if not HAS_TORCH and _needs_torch_to_import(collection_path):
        return True
    return None


def pytest_terminal_summary(terminalreporter, config):
    if HAS_TORCH:
        return
    asked = [Path(arg.split("::")[0]) for arg in config.args] or [Path("tests")]
    left_out = sorted({path for arg in asked if arg.exists()
                       for path in ([arg] if arg.is_file() else arg.rglob("test_*.py"))
                       if _needs_torch_to_import(path)})
    if left_out:
        terminalreporter.write_line(
            f"{len(left_out)} test module(s) that compare with torch were not collected "
            f"(torch is not installed: {PARITY_HINT}): "
            + ", ".join(path.name for path in left_out))
