"""Checks that only make sense with torch installed: the expectations written down in
test_ops.py and test_op_errors.py are torch's own behaviour."""
import re

import pytest
from test_op_errors import CASES
from test_ops import PROMOTION

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("make, want", PROMOTION)
def test_promotion_table_is_torchs(make, want):
    assert make(torch).dtype == getattr(torch, want)


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_torch_raises_the_same(fn, exc, message):
    with pytest.raises(Exception) as info:
        fn(torch)
    assert type(info.value) is exc
    assert re.search(re.escape(message), str(info.value))
