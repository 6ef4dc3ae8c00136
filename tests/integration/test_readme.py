"""The README's Python examples run as written and print what they say (the one that
attaches to a launched cluster gets a cluster launched by ``disthook launch``)."""
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
LAUNCHED = "tcp://127.0.0.1:5555"


def run_block(code: str, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    code = BLOCKS[index]
    launch = None
    if LAUNCHED in code:
        launch = subprocess.Popen([sys.executable, "-m", "disthook.cli", "launch", "--workers",
                                   "2", "--bind", "tcp://127.0.0.1:0", "--log-level", "WARNING"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = launch.stdout.readline()
        address = re.search(r"coordinator (tcp://\S+),", line)
        assert address, line
        code = code.replace(LAUNCHED, address.group(1))
    try:
        out = run_block(code, tmp_path)
    finally:
        if launch is not None:
            launch.send_signal(signal.SIGINT)
            try:
                launch.wait(30)
            except subprocess.TimeoutExpired:
                launch.kill()
                launch.wait()
    # what the comments promise a print prints is a whole line of the output
    lines = out.splitlines()
    for promised in re.findall(r"print\(.*\)\s+# (tensor\(.*?\)|torch\.Size\(\[.*?\]\)|\d+)",
                               code):
        assert promised in lines, (promised, out)


def test_the_readme_has_the_examples_this_test_expects():
    assert len(BLOCKS) >= 4
    assert any("local_cluster" in b for b in BLOCKS) and any(LAUNCHED in b for b in BLOCKS)
