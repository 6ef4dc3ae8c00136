"""The ``*_like`` factories take torch's ``memory_format=`` (custom optimizers make their
state with ``torch.zeros_like(p, memory_format=torch.preserve_format)``: Sophia, timm's and
HF's optimizers), and ``rand_like``/``randn_like`` take ``generator=`` and ``device=``."""
import pytest

import disthook as torch

LIKE = ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"]


@pytest.mark.parametrize("name", LIKE)
@pytest.mark.parametrize("fmt", ["preserve_format", "contiguous_format"])
def test_like_factories_take_a_memory_format(name, fmt):
    p = torch.ones(3, 4, dtype=torch.float64)
    out = getattr(torch, name)(p, memory_format=getattr(torch, fmt))
    assert out.shape == p.shape and out.dtype == torch.float64 and out.is_contiguous()


def test_full_like_and_randint_like_take_a_memory_format():
    p = torch.ones(2, 3)
    assert torch.full_like(p, 7.0, memory_format=torch.preserve_format).eq(7).all()
    drawn = torch.randint_like(p, 5, memory_format=torch.preserve_format)
    assert drawn.shape == p.shape and ((drawn >= 0) & (drawn < 5)).all()


@pytest.mark.parametrize("name", [*LIKE, "full_like", "randint_like"])
def test_a_memory_format_that_is_not_one_is_a_type_error(name):
    args = {"full_like": (1.0,), "randint_like": (5,)}.get(name, ())
    with pytest.raises(TypeError, match=f"{name}\\(\\): argument 'memory_format' must be "
                                        "torch.memory_format, not str"):
        getattr(torch, name)(torch.ones(2), *args, memory_format="preserve")


@pytest.mark.parametrize("name", ["rand_like", "randn_like"])
def test_rand_like_draws_from_the_generator_given(name):
    p = torch.zeros(4, 3)
    first = getattr(torch, name)(p, generator=torch.Generator().manual_seed(5), device="cpu")
    again = getattr(torch, name)(p, generator=torch.Generator().manual_seed(5))
    assert torch.equal(first, again)
