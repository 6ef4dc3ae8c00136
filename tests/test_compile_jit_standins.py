"""torch.compile and torch.jit run the model eagerly (one warning per process and stand-in);
torch.onnx, torch.export and torch.fx refuse at use, saying what to do instead."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook
from disthook import compiler, jit, nn


@pytest.fixture(autouse=True)
def fresh_warnings():
    compiler._warned.clear()
    yield


def test_compile_holds_the_model_and_warns_once():
    model = nn.Linear(3, 2)
    with pytest.warns(UserWarning, match="disthook has no compiler: what torch.compile"):
        compiled = disthook.compile(model, mode="max-autotune", fullgraph=True)
    assert compiled._orig_mod is model  # more in test_r7_compile_module.py
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disthook.compile(model)._orig_mod is model  # the second time is quiet

    @disthook.compile(dynamic=True)
    def double(x):
        return x * 2

    np.testing.assert_array_equal(double(disthook.ones(2)).numpy(), [2.0, 2.0])
    with pytest.raises(AssertionError, match="A callable function is expected, but <class "
                       "'int'> is provided."):
        disthook.compile(3)


def test_compiler_queries_and_decorators():
    assert disthook.compiler.is_compiling() is False
    fn = disthook.compiler.disable(lambda x: x + 1)
    assert fn(1) == 2 and disthook.compiler.disable()(len) is len


class Scripted(jit.ScriptModule):
    lim: jit.Final[int] = 3

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    @jit.script_method
    def forward(self, x):
        if jit.is_scripting() or jit.is_tracing():
            raise AssertionError("not scripting here")
        return self.helper(self.lin(x))

    @jit.ignore
    def helper(self, y):
        return y.clamp(max=self.lim)

    @jit.unused
    def never(self):
        raise RuntimeError

    @jit.export
    def exported(self):
        return 1


def test_jit_script_and_trace_run_eagerly():
    model = Scripted()
    with pytest.warns(UserWarning, match="torch.jit.script"):
        scripted = jit.script(model)
    x = disthook.randn(4, 2)
    assert scripted is model and scripted.exported() == 1
    np.testing.assert_array_equal(scripted(x).detach().numpy(), model(x).detach().numpy())
    with pytest.warns(UserWarning, match="torch.jit.trace"):
        assert jit.trace(model, (x,)) is model
    assert not isinstance(nn.Linear(1, 1), jit.ScriptModule)
    assert jit.ignore(drop=True)(len) is len and jit.annotate(list, [1]) == [1]
    assert jit.wait(jit.fork(lambda a: a + 1, 1)) == 2
    with pytest.raises(NotImplementedError, match=r"torch\.jit\.save .*no TorchScript"):
        jit.save(model, "model.pt")


def test_graph_exporters_refuse_with_what_to_do():
    model = nn.Linear(2, 2)
    assert disthook.onnx.is_in_onnx_export() is False
    with pytest.raises(NotImplementedError, match=r"^torch\.onnx\.export is not implemented.*"
                       "export there"):
        disthook.onnx.export(model, (disthook.ones(2),), "model.onnx")
    with pytest.raises(NotImplementedError, match=r"^torch\.export\.export is not implemented"):
        disthook.export.export(model, (disthook.ones(2),))
    with pytest.raises(NotImplementedError, match=r"^torch\.fx\.symbolic_trace .*no symbolic"):
        disthook.fx.symbolic_trace(model)
    assert disthook.fx.wrap("some_function") == "some_function"
    assert not isinstance(model, disthook.fx.GraphModule)


def test_same_program_under_torch():
    torch = pytest.importorskip("torch")
    assert torch.jit.is_scripting() is False and torch.onnx.is_in_onnx_export() is False
    assert torch.compiler.is_compiling() is False and torch.jit.Final is jit.Final
