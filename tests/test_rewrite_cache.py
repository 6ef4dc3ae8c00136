"""tests/rewrite_cache.py: xdist workers share pytest's rewritten test modules in the run's
bytecode directory; what runs is pytest's own rewrite, with its failure introspection."""
import os
import time
from pathlib import Path

import pytest
import rewrite_cache

pytestmark = pytest.mark.skipif(not rewrite_cache.available(),
                                reason="this pytest lacks the rewrite internals used")

FAILING = "def check():\n    x = [1, 2]\n    assert len(x) == 3, 'the list'\n"


@pytest.fixture
def hook(request):
    found = request.config.stash[rewrite_cache._rewrite.assertstate_key].hook
    if found is None:
        pytest.skip("asserts are not rewritten in this run (--assert=plain)")
    return found


def _run(code) -> str:
    space: dict = {}
    exec(code, space)  # noqa: S102 (the code of a test file written here)
    with pytest.raises(AssertionError) as caught:
        space["check"]()
    return str(caught.value)


def test_the_cached_code_is_pytests_rewrite_with_its_introspection(hook, tmp_path, monkeypatch):
    source = tmp_path / "src" / "test_one.py"
    source.parent.mkdir()
    source.write_text(FAILING)
    cache = tmp_path / "cache"
    message = _run(rewrite_cache.rewritten_code(hook, cache, source))
    assert "the list" in message and "where 2 = len([1, 2])" in message, message
    pyc = rewrite_cache.cached_pyc(cache, source)
    assert pyc.is_file() and str(pyc).startswith(str(cache))
    assert not (source.parent / "__pycache__").exists()  # nothing beside the source

    def no_second_rewrite(*args):
        raise AssertionError("rewritten again although the cache holds it")

    monkeypatch.setattr(rewrite_cache._rewrite, "_rewrite_test", no_second_rewrite)
    assert _run(rewrite_cache.rewritten_code(hook, cache, source)) == message


def test_a_changed_source_is_rewritten_again(hook, tmp_path):
    source = tmp_path / "test_two.py"
    source.write_text(FAILING)
    rewrite_cache.rewritten_code(hook, tmp_path / "cache", source)
    source.write_text(FAILING.replace("== 3", "== 4"))
    later = time.time() + 5  # another second: the cache checks size and mtime, as pytest's
    os.utime(source, (later, later))
    message = _run(rewrite_cache.rewritten_code(hook, tmp_path / "cache", source))
    assert "assert 2 == 4" in message, message


def test_each_worker_rewrites_its_own_share_ahead(hook, tmp_path):
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / ".hidden").mkdir()
    names = [f"test_{i}.py" for i in range(7)] + ["sub/test_x.py", "sub/conftest.py",
                                                   "helpers.py", ".hidden/test_no.py"]
    for name in names:
        (tests / name).write_text(FAILING)
    modules = rewrite_cache.files_to_rewrite([tests], ["test_*.py"])
    assert [m.relative_to(tests).as_posix() for m in modules] == sorted(
        [f"test_{i}.py" for i in range(7)] + ["sub/test_x.py", "sub/conftest.py"])
    cache = tmp_path / "cache"
    assert rewrite_cache.rewrite_share(hook, cache, modules, 1, 3) == 3
    written = {m for m in modules if rewrite_cache.cached_pyc(cache, m).is_file()}
    assert written == set(modules[1::3])
    for worker in (0, 2):
        rewrite_cache.rewrite_share(hook, cache, modules, worker, 3)
    assert all(rewrite_cache.cached_pyc(cache, m).is_file() for m in modules)


def test_only_an_xdist_worker_shares(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert rewrite_cache.worker_place() is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw4")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    assert rewrite_cache.worker_place() == (4, 3)  # a restarted worker: its share is 4 % 3


def test_this_runs_modules_came_through_the_cache_in_an_xdist_worker(hook):
    ours = os.environ.get("DISTHOOK_TEST_BYTECODE_DIR")
    if rewrite_cache.worker_place() is None or not ours:
        pytest.skip("not an xdist worker of a run that keeps its own bytecode directory")
    assert rewrite_cache.cached_pyc(ours, Path(__file__)).is_file()
    assert hook.exec_module.__qualname__.startswith("share_through")
