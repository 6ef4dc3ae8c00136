"""Every public torch 2.13 name imports from disthook; what disthook lacks refuses at use
with a NotImplementedError naming the torch name, and real attributes always win."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import disthook
from disthook._surface import refusal


def test_missing_class_imports_and_refuses_when_made():
    from disthook.fx import Graph

    assert disthook.fx.Graph is Graph and not isinstance(object(), Graph)
    with pytest.raises(NotImplementedError, match=r"^torch\.fx\.Graph is not "
                       r"implemented in disthook .*disthook has no symbolic tracer"):
        Graph(1, 2, 3)

    class Mine(Graph):  # subclassing works; making one refuses
        pass

    with pytest.raises(NotImplementedError, match="torch.fx.Graph"):
        Mine()


def test_refused_function_value_and_generic_class():
    assert refusal.is_refused(disthook.fft.hfft)  # (not supported: it says so, and what to use)
    with pytest.raises(NotImplementedError, match=r"^torch\.fft\.hfft \(a transform of a "):
        disthook.fft.hfft(disthook.ones(4))
    with pytest.raises(NotImplementedError, match="sparse layouts are not modelled"):
        disthook.sparse_coo_tensor([[0]], [1.0])
    with pytest.raises(NotImplementedError, match="float8 dtypes are not modelled"):
        disthook.float8_e4m3fn.itemsize  # noqa: B018
    refused = disthook.fx.Graph
    assert refused[int] is refused  # usable in annotations


def test_torch_modules_disthook_lacks_import_as_stubs():
    import disthook.ao.quantization as q
    from disthook.distributed.tensor import DTensor

    with pytest.raises(NotImplementedError, match=r"torch\.distributed\.tensor\.DTensor"):
        DTensor()
    with pytest.raises(NotImplementedError, match="quantized tensors"):
        q.quantize_dynamic(None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("disthook.no_such_module_in_torch")


def test_names_torch_lacks_stay_attribute_errors():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        disthook.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        disthook.nn.functional.no_such_name  # noqa: B018
    assert not hasattr(disthook.nn, "_private_name")


def test_real_attributes_win_and_submodules_resolve():
    assert not refusal.is_refused(disthook.nn.Linear)
    assert disthook.nn.utils.clip_grad_norm_ is not None
    assert not refusal.is_refused(disthook.nn.utils.clip_grad_norm_)
    assert disthook.nn.functional is importlib.import_module("disthook.nn.functional")


def test_a_name_added_later_replaces_its_refusal():
    module = disthook.special
    assert refusal.is_refused(module.bessel_j0)
    module.bessel_j0 = disthook.sigmoid
    try:
        assert module.bessel_j0 is disthook.sigmoid
    finally:
        del module.bessel_j0
    assert refusal.is_refused(module.bessel_j0)


def test_refusals_hold_in_a_fresh_process_that_imports_submodules_first():
    code = ("from disthook.fx import Graph\nimport disthook.utils.data as d\n"
            "from disthook.linalg import ldl_factor\nimport disthook\n"
            "assert disthook.fx.Graph is Graph and d.DataLoader\n"
            "try:\n    ldl_factor(None)\nexcept NotImplementedError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("torch.linalg.ldl_factor is not implemented")


def test_torch_aliased_to_disthook_imports_the_same_submodules():
    code = ("import sys, disthook\nsys.modules['torch'] = disthook\n"
            "import torch.nn.functional as F\nimport torch.distributed.tensor as dt\n"
            "from torch.utils.data import DataLoader\nimport torch.nn.utils.rnn as rnn\n"
            "assert F is disthook.nn.functional and DataLoader is disthook.utils.data.DataLoader\n"
            "assert dt is sys.modules['disthook.distributed.tensor']\n"
            "assert rnn.PackedSequence is disthook.nn.utils.rnn.PackedSequence\nprint('same')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out == "same\n"


def test_forward_ad_refuses_naming_the_transforms_that_give_the_same_products():
    """The forward-mode AD tutorial's dual tensors: disthook has none, and its refusal names
    torch.func.jvp and autograd.functional.jvp, which compute the same products."""
    fw = disthook.autograd.forward_ad
    for call in (fw.dual_level, lambda: fw.make_dual(disthook.ones(2), disthook.ones(2)),
                 lambda: fw.unpack_dual(disthook.ones(2))):
        with pytest.raises(NotImplementedError, match=r"torch\.autograd\.forward_ad\.\w+ is "
                           r"not implemented in disthook .*no forward-mode AD.*"
                           r"torch\.func\.jvp"):
            call()


def test_sparse_names_refuse_naming_the_dense_way_to_the_same_result():
    """A pygcn-style adjacency (sparse_coo_tensor, sparse.mm, spmm) and SparseAdam: refused,
    and the message says how to get the same numbers densely."""
    x = disthook.ones(2, 2)
    for call in (lambda: disthook.sparse_coo_tensor([[0], [1]], [1.0], (2, 2)),
                 lambda: disthook.sparse.mm(x, x), lambda: disthook.spmm(x, x),
                 lambda: disthook.sparse.FloatTensor(2, 2)):
        with pytest.raises(NotImplementedError, match=r"is not implemented in disthook .*"
                           r"index_put_\(tuple\(indices\), values, accumulate=True\).*torch\.mm"):
            call()
    with pytest.raises(NotImplementedError, match=r"SparseAdam .*sparse=True\) give a dense "
                       r"gradient.*torch\.optim\.SGD"):
        disthook.optim.SparseAdam([disthook.zeros(1)])
    # what the message says is the same result: a dense adjacency with summed duplicates
    idx, val = disthook.tensor([[0, 1, 1], [1, 0, 0]]), disthook.tensor([1.0, 2.0, 3.0])
    adj = disthook.zeros(2, 2).index_put_(tuple(idx), val, accumulate=True)
    torch = pytest.importorskip("torch")
    want = torch.sparse_coo_tensor(torch.tensor([[0, 1, 1], [1, 0, 0]]),
                                   torch.tensor([1.0, 2.0, 3.0]), (2, 2)).to_dense()
    assert adj.tolist() == want.tolist()
