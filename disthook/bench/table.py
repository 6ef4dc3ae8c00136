"""The common table: one row per case of disthook against a baseline (suites engine, nn,
dist and toolkit), as a dict that ``--json`` writes, and how it is printed."""
from __future__ import annotations


def comparison(suite: str, case: str, ours: float, baseline: float | None, target: float,
               baseline_name: str, ratio: float | None) -> dict:
    """One row: seconds of disthook and of the baseline, their ratio (lower is better) and
    the target ratio."""
    return {"suite": suite, "case": case, "disthook_s": ours, "torch_s": baseline,
            "baseline": baseline_name, "ratio": ratio, "target": target}


def print_comparisons(rows: list[dict]) -> None:
    """The rows as a table whose columns line up whatever the cases' names (the target
    stays in ``--json``'s rows: it is the project's, not a reader's)."""
    bases = [f"{r['baseline']} {r['torch_s'] * 1e3:.2f}ms" if r["torch_s"] else "n/a"
             for r in rows]
    case_w = max([len("case"), *(len(r["case"]) for r in rows)])
    base_w = max([len("baseline"), *map(len, bases)])
    print(f"{'case':<{case_w}} {'baseline':>{base_w}} {'disthook':>10} {'ratio':>7}")
    for r, base in zip(rows, bases):
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        print(f"{r['case']:<{case_w}} {base:>{base_w}} {r['disthook_s'] * 1e3:>8.2f}ms "
              f"{ratio:>7}")
