"""What opacus (1.6) imports from torch as it loads, under ``sys.modules["torch"] =
disthook``: two private modules of ``torch.distributed`` for its FSDP paths, and the type
alias ``torch.utils.data.dataloader._collate_fn_t``. ``import opacus`` stopped at the first
with ModuleNotFoundError; its per-sample gradients, clipping and noise run as in torch
once it imports (the names it only needs for FSDP refuse when used)."""
from __future__ import annotations

import subprocess
import sys


def test_opacus_import_time_names_import_under_the_alias():
    code = """
import sys, disthook
sys.modules["torch"] = disthook
from torch.distributed._tensor.experimental import implicit_replication
from torch.distributed._composable.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.utils.data.dataloader import _collate_fn_t, _worker_init_fn_t
import torch
assert not isinstance(torch.nn.Linear(2, 2), FSDPModule)
assert not isinstance(torch.zeros(2), DTensor)
try:
    implicit_replication()
except NotImplementedError as e:
    assert "torch.distributed._tensor.experimental.implicit_replication" in str(e), str(e)
else:
    raise AssertionError("implicit_replication ran")
print("imported")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "imported\n"

