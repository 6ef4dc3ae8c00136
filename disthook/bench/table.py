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
    print(f"{'case':<50} {'baseline':>21} {'disthook':>10} {'ratio':>7} {'target':>7}")
    for r in rows:
        base = f"{r['baseline']} {r['torch_s'] * 1e3:.2f}ms" if r["torch_s"] else "n/a"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        ok = "" if r["ratio"] is None else ("  ok" if r["ratio"] <= r["target"] else "  MISS")
        print(f"{r['case']:<50} {base:>21} {r['disthook_s'] * 1e3:>8.2f}ms {ratio:>7} "
              f"{r['target']:>6.2f}x{ok}")
