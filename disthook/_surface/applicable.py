"""Which torch names make no sense on disthook's dense CPU tensors, and why.

The coverage table lists them as "not applicable" with the reason, and a program that uses one
gets the reason in its NotImplementedError. A rule is a regular expression searched in the
lower-cased name (its last part); the first that matches gives the reason.
"""
from __future__ import annotations

import re

_PART = r"(?:^|_)({})(?:_|$|\d)"  # a whole underscore-separated part of the name

RULES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), why) for p, why in (
    (r"cuda|cudnn|cudart|nccl|cublas|cufft|cusparse|pin_memory|is_pinned|gpu",
     "it needs a CUDA GPU; disthook computes on the CPU"),
    (_PART.format("mps|xpu|hpu|mtia|ipu|xla|hip|vulkan|metal|maia|privateuse1|openreg"),
     "it needs an accelerator device; disthook computes on the CPU"),
    ((r"sparse|(^|_)(coo|csr|csc|bsr|bsc)(_|$)|^coalesce$|^is_coalesced$|"
      r"^indices$|^values$|^crow_indices$|^ccol_indices$|^row_indices$|^col_indices$|"
      r"^dense_dim$|^_nnz$|^smm$|^sspaddmm$|^hspmm$|^saddmm$|^spmm$"),
     "sparse layouts are not modelled: disthook tensors are dense numpy arrays"),
    ((r"quantiz|(^|_)q(int|uint|scheme|_scale|_zero_point|_per_channel)|^quint|int_repr|"
      r"per_channel|per_tensor|fbgemm|qnnpack|^dequantize"),
     "quantized tensors (integers with a scale and zero point) are not modelled"),
    (r"mkldnn|onednn|mkl(_|$)",
     "oneDNN (MKL-DNN) tensors are a layout of Intel's CPU library, not modelled"),
    (r"(^|_)nested(_|$)|jagged",
     "nested (ragged) tensors are not modelled: every disthook tensor is rectangular"),
    (r"^float8|^float4|^bits\d|^u?int[1-7]$|^complex32$|^chalf$",
     ("complex32, sub-byte and float8 dtypes are not modelled (float16/32/64, complex64/128, "
      "ints and bool are)")),
))

_FAKE_QUANT = ("disthook has no quantization workflow (observers, prepare_qat, convert); "
               "quantization-aware training's fake quantization is "
               "torch.fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, "
               "quant_max) and torch.fake_quantize_per_channel_affine(w, scales, zero_points, "
               "axis, quant_min, quant_max), with the straight-through gradient: call them in "
               "the module's forward, with scales kept as buffers")

_DENSE_ADJ = ("build the matrix dense, torch.zeros(size).index_put_(tuple(indices), values, "
              "accumulate=True) (duplicates summed, as coalesce() does), and use the dense "
              "op: torch.mm or @ for torch.sparse.mm and torch.spmm, torch.sum for "
              "torch.sparse.sum")

# names whose refusal can say exactly what to use instead
HINTS = {
    "torch.nn.parallel.DistributedDataParallel":
        "disthook spreads one model over worker processes by stages: "
        "disthook.distributed.deploy(model, ...)",
    "torch.nn.DistributedDataParallel":
        "disthook spreads one model over worker processes by stages: "
        "disthook.distributed.deploy(model, ...)",
    "torch.distributed.init_process_group":
        "disthook has no process groups; it spreads one model over workers with "
        "disthook.distributed.deploy(model, ...)",
    "torch.onnx": "disthook records no graph to export; load the state dict into the same "
                  "model in PyTorch (torch.save(model.state_dict(), path)) and export there",
    "torch.export": "disthook records no graph to export; load the state dict into the same "
                    "model in PyTorch (torch.save(model.state_dict(), path)) and export there",
    "torch.fx": "disthook has no symbolic tracer; run the module itself, or trace the same "
                "model in PyTorch",
    "torch.jit": "disthook has no TorchScript; torch.jit.script and trace give back the model, "
                 "run eagerly, and its state dict saves with torch.save(model.state_dict())",
    "torch.autograd.forward_ad": "disthook has no forward-mode AD (dual tensors); the same "
                                 "Jacobian-vector products come from torch.func.jvp(f, "
                                 "primals, tangents) or torch.autograd.functional.jvp, and "
                                 "Jacobians from torch.func.jacfwd / jacrev",
    "torch.ao.quantization": _FAKE_QUANT,
    "torch.quantization": _FAKE_QUANT,
    "torch.sparse_coo_tensor": _DENSE_ADJ,
    "torch.sparse": _DENSE_ADJ,
    "torch.spmm": _DENSE_ADJ,
    "torch.optim.SparseAdam":
        "nn.Embedding(sparse=True) and nn.EmbeddingBag(sparse=True) give a dense gradient "
        "here (marked is_sparse, as torch's), so torch.optim.SparseAdam (lazy Adam: only the "
        "rows looked up move) has no equivalent; build the layer with sparse=False and step "
        "it with torch.optim.Adam (every row moves), or keep sparse=True with torch.optim.SGD "
        "or Adagrad, which step it as torch does",
    "torch.distributions": "disthook.distributions provides every distribution, transform and "
                           "constraint of torch.distributions, with kl_divergence and "
                           "biject_to / transform_to",
}


def hint(name: str) -> str | None:
    """What to use instead of torch's ``name``: its own hint, else its namespace's."""
    while name:
        if name in HINTS:
            return HINTS[name]
        name = name.rpartition(".")[0]
    return None


def not_applicable(name: str) -> str | None:
    """Why torch's ``name`` (dotted) has no meaning here, or None when it has one."""
    last = name.rsplit(".", 1)[-1].lower()
    for pattern, why in RULES:
        if pattern.search(last):
            return why
    return None
