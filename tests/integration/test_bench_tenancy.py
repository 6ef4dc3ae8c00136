"""``disthook bench tenancy`` runs (with 1 and 2 clients, quick): every client attaches to
the published model and its calls count."""
import pytest

from disthook.bench import tenancy

pytestmark = pytest.mark.timeout(180)


def test_tenancy_bench_runs_and_counts_every_call(monkeypatch, capsys):
    monkeypatch.setattr(tenancy, "CLIENTS", (1, 2))
    rows = tenancy.run(quick=True)
    assert [r["clients"] for r in rows] == [1, 2]
    assert [r["calls"] for r in rows] == [10, 20]
    assert rows[0]["vs_one_client"] == 1.0 and all(r["calls_per_s"] > 0 for r in rows)
    tenancy.print_rows(rows)
    assert "vs 1 client" in capsys.readouterr().out
