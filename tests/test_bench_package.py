"""disthook.bench's layout: the suites import the shared helpers, never the other way round,
and never another suite."""
import ast
import pathlib

import disthook.bench

PACKAGE = pathlib.Path(disthook.bench.__file__).parent
SHARED = {"timing", "table", "stages", "gpt"}  # gpt: the GPT workload and its rows


def bench_imports(name: str) -> set[str]:
    """The disthook.bench modules that module ``name`` imports, anywhere in its code."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "disthook.bench":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("disthook.bench."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith("disthook.bench.")}
    return found - {"SUITES"}


def test_the_shared_helpers_import_no_suite_and_the_suites_no_other_suite():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert {"timing", "table", "stages", "runner", "engine", "dist", "pipeline", "peers",
            "scaleout", "scaling", "toolkit", "plot"} <= modules
    for name in SHARED:
        assert bench_imports(name) <= SHARED - {name}, name
    assert bench_imports("timing") == bench_imports("table") == set()  # the bottom layer
    for name in modules - SHARED - {"runner"}:
        assert bench_imports(name) <= SHARED, name


def test_every_suite_has_a_module_the_runner_imports():
    suites = set(disthook.bench.SUITES) - {"nn"}  # nn's cases live beside engine's
    assert suites <= bench_imports("runner")


def test_the_common_table_lines_up_whatever_the_case_names_and_shows_no_targets(capsys):
    from disthook.bench.table import comparison, print_comparisons

    rows = [comparison("toolkit", "a case whose name is longer than fifty characters, by far",
                       0.0189, 0.0214, 1.0, "client hooks", 0.88),
            comparison("toolkit", "short", 0.5, None, 1.0, "torch", None)]
    print_comparisons(rows)
    lines = capsys.readouterr().out.splitlines()
    assert len({len(line) for line in lines}) == 1, lines  # every column ends where it ends
    assert lines[0].split() == ["case", "baseline", "disthook", "ratio"]
    assert lines[1].endswith("client hooks 21.40ms    18.90ms   0.88x")
    assert lines[2].endswith("n/a   500.00ms     n/a")
    assert not any("MISS" in line or " ok" in line for line in lines)
