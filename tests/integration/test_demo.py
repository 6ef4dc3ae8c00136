"""``disthook demo`` as a user runs it: the figures and the page it writes, what it prints,
the one line it prints when the demo extra is missing, Ctrl-C, and the page in a browser
(when Chromium is installed)."""
import html.parser
import importlib.util
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# skipped without the demo's extra, which is looked for, not imported: the demo runs as a
# process of its own, and importing scikit-learn and matplotlib here cost every pytest
# process that collects this module seconds of CPU
pytestmark = [pytest.mark.timeout(240), *(
    pytest.mark.skipif(importlib.util.find_spec(module) is None,
                       reason=f"the demo needs {module} (pip install -e '.[demo]')")
    for module in ("sklearn", "matplotlib", "tqdm"))]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEMO = [sys.executable, "-m", "disthook.cli", "demo"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One ``disthook demo --epochs 2 --quick`` (its output a pipe, not a terminal): its
    output directory, stdout and stderr."""
    out = tmp_path_factory.mktemp("demo") / "out"
    proc = subprocess.run([*DEMO, "--epochs", "2", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout, proc.stderr


def image_sources(page: Path) -> list[str]:
    class Images(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.sources = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.sources.append(dict(attrs)["src"])

    parser = Images()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.sources


def test_the_figures_are_pngs_matplotlib_reads(quick_run):
    import matplotlib.image

    out, _, _ = quick_run
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["curves.png", "feature_maps.png", "grad_cam.png", "gradient_flow.png"]
    for name in pngs:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
        pixels = matplotlib.image.imread(out / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400, name
        assert np.ptp(pixels[..., :3]) > 0.5, f"{name} is blank"


def test_index_html_shows_every_figure_by_a_relative_path(quick_run):
    out, _, _ = quick_run
    sources = image_sources(out / "index.html")
    assert sorted(sources) == sorted(p.name for p in out.glob("*.png"))
    assert all((out / s).is_file() for s in sources)


def test_the_summary_gives_accuracy_files_and_hooks_fired_on_each_worker(quick_run):
    out, stdout, _ = quick_run
    accuracy = re.search(r"^test accuracy: ([\d.]+)% on (\d+) digits after 2 epoch", stdout,
                         re.MULTILINE)
    assert accuracy, stdout
    assert float(accuracy.group(1)) > 20  # chance is 10%
    assert f"files: {out.resolve() / 'index.html'}" in stdout
    workers = re.findall(r"^  (\S+) \(stage (\d): (.*)\): (.*)$", stdout, re.MULTILINE)
    assert [(stage, children) for _, stage, children, _ in workers] == [
        ("0", "(0) Conv2d, (1) ReLU"),
        ("1", "(2) Conv2d, (3) ReLU, (4) MaxPool2d, (5) Flatten, (6) Linear")], stdout
    counts = [{name: int(n) for name, n in re.findall(r"(\w+) (\d+)", fired)}
              for _, _, _, fired in workers]
    first, last = counts
    # every parameter has a norm recorder and a clip hook, fired once per micro-batch; the
    # last stage holds twice as many parameters (conv2 and linear) as the first (conv1)
    assert first["record_norm"] == first["clip_grad_norm"] > 0
    assert last["record_norm"] == last["clip_grad_norm"] == 2 * first["record_norm"]
    assert first["capture"] > 0 and last["capture"] > 0  # feature maps; logits, Grad-CAM


def test_its_progress_in_a_pipe_is_whole_lines_with_one_per_epoch(quick_run):
    out, _, stderr = quick_run
    assert "\r" not in stderr  # no bar redrawn in place where there is no terminal
    lines = stderr.splitlines()
    assert lines[0].startswith("starting a coordinator and 2 workers; digits: 480 to train")
    assert lines[1].startswith("stage 0 on worker ") and lines[1].endswith(
        ": (0) Conv2d, (1) ReLU")
    assert lines[3] == "training: 2 epoch(s) of 30 steps, batch 16"
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"]
    assert all(re.fullmatch(r"epoch \d/2: train loss [\d.]+, train accuracy [\d.]+%, test "
                            r"accuracy [\d.]+% \([\d.]+ s\)", line) for line in epochs), epochs
    assert lines[-1] == f"writing figures and index.html to {out}"


def test_without_the_demo_extra_it_says_what_to_install_in_one_line(tmp_path):
    hide = ("import sys; sys.modules['tqdm'] = None; from disthook.cli import main; "
            "sys.exit(main(['demo', '--out', 'never']))")
    proc = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "disthook demo needs tqdm: pip install -e '.[demo]'"]
    assert not (tmp_path / "never").exists()


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def descendants_of(pid: int) -> list[int]:
    """Its children, theirs, and so on (local roles may be forked from a preloaded process,
    a child of the program: deploy.warm)."""
    found = children_of(pid)
    for child in list(found):
        found += descendants_of(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_ctrl_c_stops_the_cluster_and_exits_130(tmp_path):
    proc = subprocess.Popen([*DEMO, "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "training: " not in seen:  # training has started: the cluster is up
            chunk = proc.stderr.read(1)
            assert chunk, f"the demo ended before training: {seen}"
            seen += chunk
        children = descendants_of(proc.pid)
        roles = [pid for pid in children if not children_of(pid)]
        assert len(roles) == 3  # the coordinator and two workers
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "disthook demo: interrupted; the cluster is stopped"
    assert "Traceback" not in stderr
    assert stdout == ""
    deadline = time.monotonic() + 10
    while any(alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [c for c in children if alive(c)]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHECK = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const p = document.createElement("p");
  p.id = "image-check";
  p.textContent = "IMAGES " + images.length + " LOADED " +
    images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.appendChild(p);
});
</script>
</body>"""


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-background-networking",
                           "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install "
                                             "chromium)")
def test_a_browser_loads_every_image_of_the_page(quick_run, tmp_path):
    out, _, _ = quick_run
    page = out / "index.html"
    # the same page with a script that writes down, after load, how many images loaded;
    # beside it, so that its relative image paths resolve the same way
    checked = out / "checked.html"
    checked.write_text(page.read_text(encoding="utf-8").replace("</body>", CHECK),
                       encoding="utf-8")
    dom = chromium("--dump-dom", checked.as_uri())
    found = re.search(r"IMAGES (\d+) LOADED (\d+)", dom.stdout)
    assert found, dom.stdout[-2000:] + dom.stderr[-2000:]
    assert int(found.group(1)) == len(image_sources(page)) == 4
    assert found.group(2) == found.group(1)
    shot = tmp_path / "page.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,3000", page.as_uri())
    assert shot.read_bytes()[:8] == PNG_MAGIC
