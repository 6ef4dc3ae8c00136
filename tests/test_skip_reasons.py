"""Without torch, the tests that compare with it say how to run them, and pytest's count of
results equals the count of collected tests (a module that skipped itself whole at import
used to add a result that was never collected)."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDE_TORCH = '''import importlib.machinery

_find = importlib.machinery.PathFinder.find_spec


def _find_spec(cls, fullname, path=None, target=None):
    if fullname == "torch" or fullname.startswith("torch."):
        return None
    return _find(fullname, path, target)


importlib.machinery.PathFinder.find_spec = classmethod(_find_spec)
'''
HINT = "torch is not installed: pip install -e '.[parity]' installs torch 2.13.0 and runs them"


def _bytecode_settings() -> dict:
    """The bytecode settings the inner pytest is given (the environment's own: the fixture
    ``bytecode_as_the_environment_sets_it``), so that it neither compiles what is installed
    again nor writes beside the sources."""
    names = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    return {name: os.environ[name] for name in names if name in os.environ}


def pytest_without_torch(tmp_path: Path, *args: str) -> str:
    (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin",
                                         **_bytecode_settings()},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_without_torch_each_skip_says_how_to_run_it_and_the_counts_agree(
        tmp_path, bytecode_as_the_environment_sets_it):
    files = ["tests/test_compat.py", "tests/parity"]
    # one run: its header counts what it collected ("collected N items", with " / K
    # deselected / M selected" where a mark deselects some), its last line what it ran
    out = pytest_without_torch(tmp_path, "-rs", *files)
    (collected,) = re.findall(r"^collected (\d+) items?(?: / \d+ deselected / (\d+) selected)?",
                              out, re.MULTILINE)
    count = collected[1] or collected[0]
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(line.endswith(HINT) for line in skips), skips
    passed, skipped = (re.search(rf"(\d+) {word}", out) for word in ("passed", "skipped"))
    assert int(passed.group(1)) + int(skipped.group(1)) == int(count), out
    (left_out,) = [line for line in out.splitlines() if "were not collected" in line]
    assert re.match(r"\d+ test module\(s\) that compare with torch were not collected \("
                    + re.escape(HINT) + r"\): test_\w+\.py", left_out), left_out
