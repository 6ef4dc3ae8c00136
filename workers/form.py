"""What a stage is beyond its weights' values, for the clients attached to its model: each
module's mode and plain attributes, each parameter's and buffer's dtype, shape and
``requires_grad`` (and a buffer's persistence). Only the deployer may change these
(``Stage.check_form``); each change counts in ``Stage.form``, which the answers of another
client's forwards and backwards, and the hook events sent to it, carry (``forms``), so that
its copy of the model follows (disthook/distributed/shared_form.py)."""
from __future__ import annotations

__all__ = ["describe", "forms"]


def forms(st, job, passed: dict | None = None) -> dict | None:
    """The revisions an answer to ``job`` carries: those of the stages it ``passed`` and
    this one's; None for the deployer's own calls (its model made the changes)."""
    if job.client == st.owner:
        return passed or None
    return {**(passed or {}), str(st.index): st.form}


def describe(st) -> dict:
    """The ``form`` answer: the stage's revision, each module's mode by full name (the
    stage's root "": the model's, as its last ``train()`` set it), each parameter and
    buffer as [dtype name, shape, requires_grad, persistent] by full name, and each module's
    plain attributes (None, bool, int, float, str) by path."""
    module = st.module
    tensors = {name: [p.dtype.name, list(p.shape), p.requires_grad, True]
               for name, p in module.named_parameters()}
    for owner_path, owner in module.named_modules():
        for name, b in owner._buffers.items():
            if b is not None:
                full = f"{owner_path}.{name}" if owner_path else name
                tensors[full] = [b.dtype.name, list(b.shape), False,
                                 name not in owner._non_persistent_buffers_set]
    return {"stage": st.index, "revision": st.form,
            "modes": {path: m.training for path, m in module.named_modules()},
            # the modes of the modules its deployer keeps on its client, as it sent them
            "client": getattr(st, "client_modes", None) or {},
            "tensors": tensors,
            "attrs": {path: {k: v for k, v in m.__dict__.items()
                             if type(v) in _PLAIN and k != "training" and not k.startswith("_")}
                      for path, m in module.named_modules()}}


_PLAIN = frozenset({type(None), bool, int, float, str})
