"""The coverage table of torch's public surface: the recorded torch names match the torch
installed (when it is 2.13), and the table in docs/torch_surface.md is the one the script
makes now."""
from __future__ import annotations

import json

import pytest

from disthook._surface import coverage, generate, refusal


def test_table_in_the_docs_is_current():
    rows = coverage.measure()
    text = coverage.SUMMARY_DOC.read_text()
    body = text[text.index(coverage.BEGIN) + len(coverage.BEGIN):text.index(coverage.END)]
    assert body.strip() == coverage.summary_table(rows).strip(), (
        "run: python -m disthook._surface.coverage --write")
    assert coverage.NAMES_DOC.read_text() == coverage.names_doc(rows)


def test_table_numbers_parse_and_add_up():
    rows = coverage.parse_table(coverage.SUMMARY_DOC.read_text())
    assert set(rows) == set(coverage.COVERED) | {coverage.NN_MODULES, coverage.TORCH_FUNCTIONS}
    names = refusal.torch_data()["namespaces"]
    for namespace, (total, *counts) in rows.items():
        assert sum(counts) == total
        if namespace in names:
            assert total == len(names[namespace])
    assert rows["torch"][1] > 150 and rows["torch.Tensor"][1] > 150  # implemented, surely


def test_each_category_is_what_it_says():
    assert coverage.classify("torch", "tensor") == "implemented"
    assert coverage.classify("torch.Tensor", "backward") == "implemented"
    assert coverage.classify("torch", "sparse_coo_tensor") == "not applicable"
    assert coverage.classify("torch.Tensor", "q_scale") == "not applicable"
    refused = [n for n in refusal.torch_names("torch.nn.functional")
               if coverage.classify("torch.nn.functional", n) == "refused"]
    for name in refused[:5]:
        with pytest.raises(NotImplementedError, match=f"torch.nn.functional.{name} is not"):
            getattr(__import__("disthook").nn.functional, name)()


def test_recorded_names_are_torch_213s():
    torch = pytest.importorskip("torch")
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the names are torch 2.13's; this is torch {torch.__version__}")
    fresh = json.loads(json.dumps(generate.generate()))
    assert fresh == refusal.torch_data(), "run: python -m disthook._surface.generate"
