"""A user's ``autograd.Function`` inside ``vmap``, as torch 2.13 treats it
(``torch._functorch.autograd_function``): with ``generate_vmap_rule=False`` and a ``vmap``
staticmethod of its own, torch calls that staticmethod once with the whole batch (its
``info.batch_size``, the tensors' ``in_dims``) and slices its outputs by ``out_dims``;
disthook ran the forward per index and never called it (a rule that computes otherwise than
the forward gave other values, silently). A Function without ``setup_context``, with
neither rule or with both, raises in torch; disthook computed. Each program runs in both
libraries."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

X = (np.arange(6, dtype=np.float32).reshape(3, 2) / 4)


def _cube(lib, log):
    class Cube(lib.autograd.Function):
        generate_vmap_rule = False

        @staticmethod
        def forward(x, k):
            return x ** 3 * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x ** 2 * g * ctx.k, None

        @staticmethod
        def vmap(info, in_dims, x, k):
            log.append((info.batch_size, info.randomness, in_dims, tuple(x.shape)))
            return Cube.apply(x, k) + 1, in_dims[0]  # (+1: not what the forward computes)

    return Cube


@pytest.mark.parametrize("in_dims", [0, 1])
def test_a_function_s_own_vmap_is_called_once_with_the_batch(in_dims):
    def run(lib):
        log = []
        cube = _cube(lib, log)
        x = lib.tensor(X, requires_grad=True)
        out = lib.vmap(lambda r: cube.apply(r, 2.0), in_dims=in_dims)(x)
        out.sum().backward()
        return out.detach().numpy(), x.grad.numpy(), log

    got, want = run(disthook), run(torch)
    assert got[2] == want[2] and len(want[2]) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def _variant(lib, case):
    class Base(lib.autograd.Function):
        @staticmethod
        def forward(x, y=None):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    if case == "no setup_context":
        class Old(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        return Old
    if case == "neither":
        return Base
    if case == "both":
        class Both(Base):
            generate_vmap_rule = True

            @staticmethod
            def vmap(info, in_dims, x, y=None):
                return x * 2, in_dims[0]
        return Both

    class Generated(Base):
        generate_vmap_rule = True
    return Generated


@pytest.mark.parametrize("case", ["no setup_context", "neither", "both", "generated",
                                  "generated, a keyword"])
def test_which_functions_vmap_takes(case):
    def run(lib):
        fn = _variant(lib, case)
        x = lib.ones(3, 2)
        try:
            if case.endswith("keyword"):
                return lib.vmap(lambda r: fn.apply(r, y=r))(x).tolist()
            return lib.vmap(fn.apply)(x).tolist()
        except (RuntimeError, NotImplementedError) as exc:
            return type(exc).__name__, str(exc).split(".")[0]

    assert run(disthook) == run(torch)


def test_a_rule_given_a_tensor_computed_inside_the_function_is_refused():
    cube = _cube(disthook, [])
    with pytest.raises(NotImplementedError, match=r"Cube's own vmap staticmethod.*"
                                                  r"generate_vmap_rule=True"):
        disthook.vmap(lambda r: cube.apply(r * 2, 2.0))(disthook.tensor(X))
