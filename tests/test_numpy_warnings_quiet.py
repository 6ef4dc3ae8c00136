"""Floating-point edge cases give nan and inf silently, as torch does: a program run with
``-W error`` goes on, and numpy's warnings from the program's own numpy code stay."""
import subprocess
import sys

PROGRAM = r"""
import numpy as np
import disthook as torch
x = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)
y = torch.stack([x / x.detach()[0], torch.log(x), torch.sqrt(x), torch.exp(x * 1000)])
y.sum().backward()
print(y.isnan().sum().item(), y.isinf().sum().item(), x.grad.isnan().sum().item())
try:
    np.log(np.zeros(1))
except RuntimeWarning as w:
    print("numpy's own:", w)
"""


def test_nan_and_inf_without_numpy_warnings_under_w_error():
    out = subprocess.run([sys.executable, "-W", "error", "-c", PROGRAM], check=False,
                         capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "3 4 1"  # as torch 2.13 prints it
    assert lines[1] == "numpy's own: divide by zero encountered in log"
