"""The documentation stands on its own in a clone: every link of the README and docs/ leads
to a file of the repository or to a public web page, nothing points outside the clone (a
directory beside it did), and every ``hook_semantics.md §N`` cited in the sources is a
section of docs/hook_semantics.md."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)  # code: net[0](x) is no link
OUTSIDE = ("../" + "shared/", "shared/" + "hook_semantics")  # spelled so, not to match here


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_is_a_file_of_the_repository_or_a_public_page(page):
    for target in LINK.findall(CODE.sub("", page.read_text(encoding="utf-8"))):
        if target.startswith(("https://", "http://", "#", "mailto:")):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), (page.name, target)


def test_nothing_points_outside_the_clone():
    for path in [*tracked("*.md", "*.py"), *PAGES]:
        text = path.read_text(encoding="utf-8")
        assert not any(text_outside in text for text_outside in OUTSIDE), path


def test_every_cited_section_of_the_hook_semantics_exists():
    page = (ROOT / "docs" / "hook_semantics.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", page, re.MULTILINE)}
    assert sections == set(range(17))
    cited = set()
    for path in tracked("*.py", "*.md"):
        for refs in re.findall(r"hook_semantics\.md((?:[ ,(]*§[\d.]+(?:-§[\d.]+)?)+)",
                               path.read_text(encoding="utf-8")):
            cited |= {(path.name, int(n)) for n in re.findall(r"§(\d+)", refs)}
    assert cited, "the engine and the tests cite sections"
    assert {(name, n) for name, n in cited if n not in sections} == set()
