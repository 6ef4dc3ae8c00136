"""Bad input to ops raises torch's exception type with torch's message.

CASES is shared with tests/parity/test_op_error_parity.py, which runs every case under torch
and checks that torch raises the same type with the same message.
"""
import re

import pytest

import disthook


def _hook_returns_a_str(t):
    """A forward hook that returns a str: the next layer gets it (torch's TypeError)."""
    seq = t.nn.Sequential(t.nn.Linear(2, 2), t.nn.Linear(2, 2))
    seq[0].register_forward_hook(lambda module, args, out: "oops")
    return seq(t.ones(1, 2))


# (id, fn of the torch-like module, exception type, torch's message)
CASES = [
    ("hook_returns_str", _hook_returns_a_str, TypeError,
     "linear(): argument 'input' (position 1) must be Tensor, not str"),
    ("tanh_of_str", lambda t: t.tanh("x"), TypeError,
     "tanh(): argument 'input' (position 1) must be Tensor, not str"),
    # broadcasting
    ("add", lambda t: t.ones(3) + t.ones(4), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"),
    ("mul2d", lambda t: t.ones(2, 3) * t.ones(3, 2), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1"),
    ("sub3d", lambda t: t.ones(2, 3, 4) - t.ones(5, 4), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (5) at non-singleton dimension 1"),
    ("div", lambda t: t.ones(2, 3) / t.ones(2, 2), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1"),
    ("maximum", lambda t: t.maximum(t.ones(3), t.ones(4)), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"),
    ("where", lambda t: t.where(t.ones(3) > 0, t.ones(3), t.ones(4)), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"),
    ("pow", lambda t: t.ones(3) ** t.ones(2), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 0"),
    ("add_", lambda t: t.ones(3).add_(t.ones(2, 3)), RuntimeError,
     "output with shape [3] doesn't match the broadcast shape [2, 3]"),
    ("masked_fill_shape", lambda t: t.ones(2, 3).masked_fill(t.ones(4, dtype=t.bool), 0.0),
     RuntimeError,
     "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1"),
    # matrix products
    ("mm", lambda t: t.ones(2, 3).mm(t.ones(4, 5)), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    ("matmul2d", lambda t: t.ones(2, 3) @ t.ones(4, 5), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    ("matmul_vm", lambda t: t.ones(3) @ t.ones(4, 5), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"),
    ("matmul_mv", lambda t: t.ones(2, 3) @ t.ones(4), RuntimeError,
     "size mismatch, got input (2), mat (2x3), vec (4)"),
    ("matmul_vv", lambda t: t.ones(3) @ t.ones(4), RuntimeError,
     ("inconsistent tensor size, expected tensor [3] and src [4] to have the same number of "
      "elements, but got 3 and 4 elements respectively")),
    ("matmul_bmm", lambda t: t.ones(2, 2, 3) @ t.ones(2, 4, 5), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]."),
    ("matmul_b2", lambda t: t.ones(2, 2, 3) @ t.ones(4, 5), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)"),
    ("matmul_batch", lambda t: t.ones(2, 2, 3) @ t.ones(3, 3, 5), RuntimeError,
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
    ("matmul_0d", lambda t: t.ones(()) @ t.ones(3), RuntimeError,
     "both arguments to matmul need to be at least 1D, but they are 0D and 1D"),
    ("bmm", lambda t: t.ones(2, 2, 3).bmm(t.ones(2, 4, 5)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]."),
    ("mv", lambda t: t.ones(2, 3).mv(t.ones(4)), RuntimeError,
     "size mismatch, got input (2), mat (2x3), vec (4)"),
    ("dot", lambda t: t.ones(3).dot(t.ones(4)), RuntimeError,
     ("inconsistent tensor size, expected tensor [3] and src [4] to have the same number of "
      "elements, but got 3 and 4 elements respectively")),
    ("matmul_dtype_dot", lambda t: t.ones(2) @ t.ones(2, dtype=t.float64), RuntimeError,
     "dot : expected both vectors to have same dtype, but found Float and Double"),
    ("matmul_dtype_mv", lambda t: t.ones(2, 2) @ t.ones(2, dtype=t.float64), RuntimeError,
     "addmv input tensors must have the same dtype, but got Double, Float, and Double"),
    ("matmul_dtype_mm", lambda t: t.ones(2, 2) @ t.ones(2, 2, dtype=t.int64), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: float != long int"),
    ("matmul_dtype_bmm", lambda t: t.ones(2, 2, 2, dtype=t.float64) @ t.ones(2, 2, 2),
     RuntimeError, "expected scalar type Double but found Float"),
    ("mm_dtype", lambda t: t.ones(2, 2).mm(t.ones(2, 2, dtype=t.float64)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: float != double"),
    ("linear_dtype", lambda t: t.nn.functional.linear(t.ones(2, 3, dtype=t.int64),
                                                      t.ones(4, 3)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: long int != float"),
    ("linear_bias_input_dtype", lambda t: t.nn.Linear(3, 4)(t.ones(5, 2, 3, dtype=t.int64)),
     RuntimeError, "mat1 and mat2 must have the same dtype, but got Long and Float"),
    ("linear_bias_dtype", lambda t: t.nn.functional.linear(
        t.ones(2, 3), t.ones(4, 3), t.ones(4, dtype=t.float64)), RuntimeError,
     "self and mat2 must have the same dtype, but got Double and Float"),
    # view and reshape
    ("view", lambda t: t.ones(2, 3).view(4), RuntimeError,
     "shape '[4]' is invalid for input of size 6"),
    ("view2", lambda t: t.ones(2, 3).view(-1, -1), RuntimeError,
     "only one dimension can be inferred"),
    ("view_inf", lambda t: t.ones(2, 3).view(4, -1), RuntimeError,
     "shape '[4, -1]' is invalid for input of size 6"),
    ("reshape", lambda t: t.ones(2, 3).reshape(5), RuntimeError,
     "shape '[5]' is invalid for input of size 6"),
    ("view_nc", lambda t: t.ones(2, 3).t().view(6), RuntimeError,
     ("view size is not compatible with input tensor's size and stride (at least one "
      "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")),
    # dims out of range
    ("sum_dim", lambda t: t.ones(2, 3).sum(dim=2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("sum_neg", lambda t: t.ones(2, 3).sum(dim=-3), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got -3)"),
    ("sum_tuple", lambda t: t.ones(2, 3).sum(dim=(0, 2)), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("sum_dup", lambda t: t.ones(2, 3).sum(dim=(0, 0)), RuntimeError,
     "dim 0 appears multiple times in the list of dims"),
    ("mean_dim", lambda t: t.ones(2, 3).mean(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("var_dim", lambda t: t.ones(2, 3).var(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("amax_dim", lambda t: t.ones(2, 3).amax(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("max_dim", lambda t: t.ones(2, 3).max(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("prod_dim", lambda t: t.ones(2, 3).prod(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("softmax_dim", lambda t: t.ones(2, 3).softmax(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("log_softmax_dim", lambda t: t.ones(2, 3).log_softmax(-3), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got -3)"),
    ("logsumexp_dim", lambda t: t.ones(2, 3).logsumexp(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("cumsum_dim", lambda t: t.ones(2, 3).cumsum(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("norm_dim", lambda t: t.ones(2, 3).norm(dim=2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("transpose_dim", lambda t: t.ones(2, 3).transpose(0, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("permute_dim", lambda t: t.ones(2, 3).permute(0, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("unsqueeze_dim", lambda t: t.ones(2, 3).unsqueeze(3), IndexError,
     "Dimension out of range (expected to be in range of [-3, 2], but got 3)"),
    ("squeeze_dim", lambda t: t.ones(2, 3).squeeze(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("flatten_dim", lambda t: t.ones(2, 3).flatten(0, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("narrow_dim", lambda t: t.ones(2, 3).narrow(2, 0, 1), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("select_dim", lambda t: t.ones(2, 3).select(2, 0), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("split_dim", lambda t: t.ones(2, 3).split(1, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("unbind_dim", lambda t: t.ones(2, 3).unbind(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("gather_dim", lambda t: t.ones(2, 3).gather(2, t.zeros(2, 3, dtype=t.int64)), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("cat_dim", lambda t: t.cat([t.ones(2, 3), t.ones(2, 3)], 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("stack_dim", lambda t: t.stack([t.ones(2, 3), t.ones(2, 3)], 3), IndexError,
     "Dimension out of range (expected to be in range of [-3, 2], but got 3)"),
    ("size_dim", lambda t: t.ones(2, 3).size(2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    # indexing
    ("getitem_int", lambda t: t.ones(2, 3)[2], IndexError,
     "index 2 is out of bounds for dimension 0 with size 2"),
    ("getitem_neg", lambda t: t.ones(2, 3)[:, -4], IndexError,
     "index -4 is out of bounds for dimension 1 with size 3"),
    ("getitem_many", lambda t: t.ones(2, 3)[0, 0, 0], IndexError,
     "too many indices for tensor of dimension 2"),
    ("getitem_arr", lambda t: t.ones(2, 3)[t.tensor([0, 2])], IndexError,
     "index 2 is out of bounds for dimension 0 with size 2"),
    ("select_idx", lambda t: t.ones(2, 3).select(0, 5), IndexError,
     "select(): index 5 out of range for tensor of size [2, 3] at dimension 0"),
    ("getitem_negative_step", lambda t: t.ones(3)[::-1], ValueError,
     "step must be greater than zero"),
    ("getitem_zero_step", lambda t: t.ones(3)[::0], ValueError, "slice step cannot be zero"),
    ("narrow_start", lambda t: t.ones(2, 3).narrow(1, 5, 1), IndexError,
     "start out of range (expected to be in range of [-3, 3], but got 5)"),
    ("narrow_length", lambda t: t.ones(2, 3).narrow(1, 2, 2), RuntimeError,
     "start (2) + length (2) exceeds dimension size (3)."),
    ("narrow_negative_length", lambda t: t.ones(3).narrow(0, 0, -1), RuntimeError,
     "narrow(): length must be non-negative."),
    ("gather_index_out_of_bounds", lambda t: t.ones(2, 3).gather(1, t.tensor([[5], [0]])),
     RuntimeError, "index 5 is out of bounds for dimension 1 with size 3"),
    ("gather_negative_index", lambda t: t.ones(3).gather(0, t.tensor([-1])), RuntimeError,
     "index -1 is out of bounds for dimension 0 with size 3"),
    # empty reductions
    ("max_of_empty", lambda t: t.ones(0).max(), RuntimeError,
     "max(): Expected reduction dim to be specified for input.numel() == 0."),
    ("min_of_empty", lambda t: t.ones(0).min(), RuntimeError,
     "min(): Expected reduction dim to be specified for input.numel() == 0."),
    ("max_over_empty_dim", lambda t: t.ones(3, 0).max(1), IndexError,
     "max(): Expected reduction dim 1 to have non-zero size."),
    ("amin_over_empty_dim", lambda t: t.ones(0, 3).amin((0, 1)), IndexError,
     "amin(): Expected reduction dim 0 to have non-zero size."),
    # joining
    ("cat_shapes", lambda t: t.cat([t.ones(2, 3), t.ones(2, 4)]), RuntimeError,
     ("Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for "
      "tensor number 1 in the list.")),
    ("cat_ndim", lambda t: t.cat([t.ones(2, 3), t.ones(3)]), RuntimeError,
     "Tensors must have same number of dimensions: got 2 and 1"),
    ("cat_empty", lambda t: t.cat([]), ValueError,
     "torch.cat(): expected a non-empty list of Tensors"),
    ("cat_0d", lambda t: t.cat([t.ones(()), t.ones(())]), RuntimeError,
     "zero-dimensional tensor (at position 0) cannot be concatenated"),
    ("stack_shapes", lambda t: t.stack([t.ones(2, 3), t.ones(2, 4)]), RuntimeError,
     "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1"),
    # other arguments
    ("expand", lambda t: t.ones(2, 3).expand(4, 3), RuntimeError,
     ("The expanded size of the tensor (4) must match the existing size (2) at non-singleton "
      "dimension 0.  Target sizes: [4, 3].  Tensor sizes: [2, 3]")),
    ("expand_few", lambda t: t.ones(2, 3).expand(3), RuntimeError,
     ("expand(torch.FloatTensor{[2, 3]}, size=[3]): the number of sizes provided (1) must be "
      "greater or equal to the number of dimensions in the tensor (2)")),
    ("repeat_negative", lambda t: t.ones(3).repeat(-1), RuntimeError,
     "Trying to create tensor with negative dimension -3: [-3]"),
    ("chunk_zero", lambda t: t.ones(3).chunk(0), RuntimeError,
     "chunk expects `chunks` to be greater than 0, got: 0"),
    ("view_negative_size", lambda t: t.ones(6).view(-2, 3), RuntimeError,
     "invalid shape dimension -2 at index 0 of shape [-2, 3]"),
    ("repeat_few", lambda t: t.ones(2, 3).repeat(2), RuntimeError,
     "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"),
    ("split_sizes", lambda t: t.ones(5).split([2, 2]), RuntimeError,
     ("split_with_sizes expects split_sizes to sum exactly to 5 (input tensor's size at "
      "dimension 0), but got split_sizes=[2, 2]")),
    ("masked_fill_dtype", lambda t: t.ones(2, 3).masked_fill(t.ones(2, 3), 0.0), RuntimeError,
     "masked_fill_ only supports boolean masks, but got mask with dtype float"),
    ("where_cond", lambda t: t.where(t.ones(3), t.ones(3), t.ones(3)), RuntimeError,
     "where expected condition to be a boolean tensor, but got a tensor with dtype Float"),
    ("gather_ndim", lambda t: t.ones(2, 3).gather(1, t.zeros(2, dtype=t.int64)), RuntimeError,
     "Index tensor must have the same number of dimensions as input tensor"),
    ("gather_dtype", lambda t: t.ones(2, 3).gather(1, t.zeros(2, 3)), RuntimeError,
     "gather(): Expected dtype int32/int64 for index"),
    ("gather_size", lambda t: t.ones(2, 3).gather(1, t.zeros(3, 3, dtype=t.int64)), RuntimeError,
     ("Size does not match at dimension 0 expected index [3, 3] to be no larger than self [2,"
      " 3] apart from dimension 1")),
    ("var_int", lambda t: t.tensor([1, 2]).var(), RuntimeError,
     "std and var only support floating point and complex dtypes"),
    ("std_int", lambda t: t.tensor([1, 2]).std(0), RuntimeError,
     "std and var only support floating point and complex dtypes"),
    ("norm_int", lambda t: t.tensor([1, 2]).norm(), RuntimeError,
     "linalg.vector_norm: Expected a floating point or complex tensor as input. Got Long"),
    ("neg_bool", lambda t: -t.tensor([True]), RuntimeError,
     "Negation, the `-` operator, on a bool tensor is not supported."),
    ("pow_int_negative", lambda t: t.tensor([1, 2]) ** -1, RuntimeError,
     "Integers to negative integer powers are not allowed."),
    ("clamp_mixed_bounds", lambda t: t.ones(3).clamp(t.zeros(3), 2.0), TypeError,
     "clamp() received an invalid combination of arguments - got (Tensor, float)"),
    ("clamp_none", lambda t: t.ones(3).clamp(), RuntimeError,
     "torch.clamp: At least one of 'min' or 'max' must not be None"),
    ("mean_int", lambda t: t.tensor([1, 2]).mean(), RuntimeError,
     ("mean(): could not infer output dtype. Input dtype must be either a floating point or "
      "complex dtype. Got: Long")),
    ("permute_len", lambda t: t.ones(2, 3).permute(0), RuntimeError,
     "input.dim() = 2 is not equal to len(dims) = 1"),
]


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises(fn, exc, message):
    with pytest.raises(exc, match=re.escape(message)) as info:
        fn(disthook)
    assert type(info.value) is exc


def test_broadcast_error_when_recording_a_graph():
    x = disthook.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape(
            "The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
            "dimension 1")):
        x * disthook.ones(2, 4)


def test_an_op_given_something_else_than_a_tensor_raises_type_error():
    """Not an AttributeError from inside the op: the exception type torch gives."""
    for fn in (lambda: disthook.relu(None), lambda: disthook.nn.functional.gelu("x"),
               lambda: disthook.ones(2).addcmul("a", "b")):
        with pytest.raises(TypeError):
            fn()
