"""The xdist workers of one run share pytest's rewritten test modules.

pytest rewrites the asserts of every test module it imports (the introspection a failing
``assert`` prints) and keeps the result as a ``.pyc`` beside the module, unless bytecode
files are turned off (``PYTHONDONTWRITEBYTECODE``, as on this project's machines and CI):
then every xdist worker parses, rewrites and compiles all ~200 test modules again (10-13
CPU-s each, most of a worker's collection). Here the workers keep the rewritten modules
in the run's own bytecode directory (the one ``conftest.py`` makes, removed at the run's
end), so that nothing is written beside the sources, and each worker first rewrites its
share of the modules (every n-th), before collecting, so that each module is rewritten
about once per run instead of once per worker.

The code each worker runs is pytest's own rewrite of the module, byte for byte: the cached
file holds what ``_rewrite_test`` returned, checked against the source's size and mtime as
pytest checks its own cache. Where this pytest lacks the functions used (they are its
internals), nothing changes and pytest rewrites as usual.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

try:
    from _pytest.assertion import rewrite as _rewrite
except ImportError:  # pragma: no cover - a pytest without the module
    _rewrite = None

_NEEDED = ("assertstate_key", "PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc",
           "AssertionRewritingHook")


def available() -> bool:
    """Whether this pytest has the internals the sharing uses."""
    return _rewrite is not None and all(hasattr(_rewrite, name) for name in _NEEDED)


def cached_pyc(cache_root: Path, source: Path) -> Path:
    """Where the rewritten ``source`` is kept under ``cache_root`` (the source's absolute
    path below it, as a bytecode prefix lays out its files)."""
    source = source.absolute()
    return Path(cache_root, *source.parts[1:-1], source.name[:-3] + _rewrite.PYC_TAIL)


def rewritten_code(hook, cache_root: Path, source: Path):
    """The rewritten code of ``source``: read from the cache if a worker has written it for
    this very source (size and mtime), else rewritten here and written for the others."""
    state = hook.config.stash[_rewrite.assertstate_key]
    pyc = cached_pyc(cache_root, source)
    code = _rewrite._read_pyc(source, pyc, state.trace)
    if code is None:
        source_stat, code = _rewrite._rewrite_test(source, hook.config)
        pyc.parent.mkdir(parents=True, exist_ok=True)
        hook._writing_pyc = True  # as pytest guards its own write
        try:
            _rewrite._write_pyc(state, code, source_stat, pyc)  # atomic: a rename
        finally:
            hook._writing_pyc = False
    return code


def share_through(hook, cache_root: Path) -> None:
    """Make ``hook`` (pytest's assertion-rewriting import hook of this process) load its
    modules through the cache at ``cache_root``."""

    def exec_module(module) -> None:
        source = Path(module.__spec__.origin)
        hook._rewritten_names[module.__name__] = source  # as pytest's exec_module records it
        exec(rewritten_code(hook, cache_root, source), module.__dict__)  # noqa: S102 (a loader)

    hook.exec_module = exec_module


def files_to_rewrite(paths: list[Path], patterns: list[str]) -> list[Path]:
    """The files under ``paths`` that pytest rewrites when it imports them: those matching
    ``python_files`` and the ``conftest.py`` files, sorted."""
    found: set[Path] = set()
    for path in paths:
        files = [path] if path.is_file() else path.rglob("*.py")
        for file in files:
            if any(part.startswith(".") for part in file.parts):
                continue
            if file.name == "conftest.py" or any(fnmatch.fnmatch(file.name, pattern)
                                                 for pattern in patterns):
                found.add(file.absolute())
    return sorted(found)


def rewrite_share(hook, cache_root: Path, modules: list[Path], worker: int,
                  workers: int) -> int:
    """Rewrite this worker's share of ``modules`` (every ``workers``-th, from
    ``worker``) into the cache ahead of collection; the number rewritten or found."""
    share = modules[worker % workers::workers]
    for source in share:
        rewritten_code(hook, cache_root, source)
    return len(share)


def share_in_this_worker(config, cache_root: Path) -> None:
    """In an xdist worker: load the test modules through the cache at ``cache_root`` and
    rewrite this worker's share of those the run will collect ahead of collection."""
    place = worker_place()
    hook = getattr(config.stash.get(_rewrite.assertstate_key, None), "hook", None) \
        if available() else None
    if place is None or hook is None:  # not a worker, or asserts not rewritten (--assert=plain)
        return
    share_through(hook, cache_root)
    asked = [config.invocation_params.dir / arg.split("::")[0] for arg in config.args]
    modules = files_to_rewrite([path for path in asked if path.exists()],
                               list(hook.fnpats))
    rewrite_share(hook, cache_root, modules, *place)


def worker_place() -> tuple[int, int] | None:
    """This xdist worker's index and the number of workers, or None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (name.startswith("gw") and name[2:].isdigit() and count.isdigit()):
        return None
    return int(name[2:]), max(int(count), 1)
