"""The README's Python examples run as written and print what they say (the one that
attaches to a launched cluster gets a cluster launched by ``disthook launch``)."""
import functools
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
LAUNCHED = "tcp://127.0.0.1:5555"


def run_block(code: str, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=200, check=False)
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


DOCS = sorted((README.parent / "docs").glob("*.md"))


def promised_lines(code: str) -> list[str]:
    return re.findall(r"print\(.*\)\s+# (tensor\(.*?\)|torch\.Size\(\[.*?\]\)|\[.*?\]|\d+)$",
                      code, re.MULTILINE)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_python_of_each_doc_runs_in_order_and_prints_what_it_says(doc, tmp_path):
    code = "\n".join(re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL))
    if not code:
        pytest.skip(f"{doc.name} has no Python")
    out = run_block(code, tmp_path).splitlines()
    for promised in promised_lines(code):
        assert promised in out, (promised, out)


def command_lines(text: str) -> list[str]:
    """Every ``disthook ...`` command in the bash blocks of ``text`` (comments dropped,
    continuation lines joined)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("disthook "):
                lines.append(line)
            elif " && disthook " in line:
                lines.append("disthook " + line.split(" && disthook ", 1)[1])
    return lines


ALL_COMMANDS = [line for path in [README, *DOCS, README.parent / "deploy" / "README.md"]
                for line in command_lines(path.read_text())]


@functools.cache
def role_help(module: str) -> str:
    """A role's ``--help`` (asked once per role and process: a process start each)."""
    return subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=60, check=True).stdout


@pytest.mark.parametrize("line", ALL_COMMANDS)
def test_every_documented_command_line_is_accepted_by_its_parser(line):
    import shlex

    from disthook.cli import ROLES, build_parser

    words = shlex.split(line)[1:]
    if words[0] in ROLES:  # the roles parse their own options: each must be one of them
        helped = role_help(ROLES[words[0]])
        for word in words[1:]:
            if word.startswith("--"):
                assert word in helped, (line, word)
        return
    build_parser().parse_args(words)  # exits (SystemExit) on anything it does not take


def test_the_docs_have_what_issue_9_asks_for():
    names = {p.name for p in DOCS}
    assert {"quickstart.md", "hooks.md", "distributed.md", "cli.md", "security.md"} <= names
    assert len(ALL_COMMANDS) >= 20
