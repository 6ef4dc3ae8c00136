"""``DistributedOptimizer``: an optimizer of ``disthook.optim`` whose state and steps live
with the parameters of a deployed model, each worker stepping its own share; its
``zero_grad()``, and every ``step()`` after its first, ride with the model's next
forward."""
from __future__ import annotations

import itertools

from disthook.distributed.parameters import RemoteParameter

__all__ = ["DistributedOptimizer"]

_optimizer_ids = itertools.count(1)


class DistributedOptimizer:
    """An optimizer of ``disthook.optim`` whose state and steps live with the parameters:
    each worker steps its own share, exactly as the local optimizer would.

    With ``checkpoint_every=K`` and ``checkpoint=PATH`` every K-th ``step()`` ends by saving
    the model with this optimizer's state to PATH (``remote.save``, atomic), tagged with the
    number of steps taken, which ``remote.recover(optimizer=...)`` returns after a loss."""

    def __init__(self, optimizer_class, params, *, checkpoint_every: int | None = None,
                 checkpoint: str | None = None, **kwargs):
        from disthook import optim

        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, optim.Optimizer)
                and getattr(optim, optimizer_class.__name__, None) is optimizer_class):
            raise TypeError(f"DistributedOptimizer takes an optimizer class of disthook.optim, "
                            f"got {optimizer_class!r}")
        params = list(params)
        if not params or not all(isinstance(p, RemoteParameter) for p in params):
            raise TypeError("DistributedOptimizer takes the parameters of a deployed model "
                            "(remote.parameters())")
        self.id = next(_optimizer_ids)
        self.class_name = optimizer_class.__name__
        self.kwargs = kwargs
        self.params = [(p._model, p._path) for p in params]
        self.models = {id(p._model): p._model for p in params}
        if (checkpoint_every is None) != (checkpoint is None):
            raise ValueError("DistributedOptimizer: checkpoint_every=K and checkpoint=PATH go "
                             f"together, got checkpoint_every={checkpoint_every!r}, "
                             f"checkpoint={checkpoint!r}")
        if checkpoint_every is not None:
            if (not isinstance(checkpoint_every, int) or isinstance(checkpoint_every, bool)
                    or checkpoint_every < 1):
                raise ValueError("DistributedOptimizer: checkpoint_every must be an int >= 1, "
                                 f"got {checkpoint_every!r}")
            if len(self.models) != 1:
                raise ValueError("DistributedOptimizer: checkpoint_every saves one model; "
                                 f"these parameters belong to {len(self.models)} models")
        self.checkpoint_every, self.checkpoint = checkpoint_every, checkpoint
        self.steps = 0  # step() calls so far (recover() sets it back to the checkpoint's)

    @property
    def shares(self) -> dict[tuple, list[str]]:
        """(model id, address) -> parameter names: where each share lives now (a recovered
        model's stages may have moved to other workers)."""
        shares: dict[tuple, list[str]] = {}
        for model, path in self.params:
            shares.setdefault((id(model), model._owner(path)), []).append(path)
        return shares

    def _each(self, action: str, per_share=None, only: str | None = None, **extra) -> dict:
        """Every worker's share at once (per model, or of the model whose id is ``only``),
        then wait for all of them; the results by (model id, address). ``per_share(names)``
        adds fields for one share."""
        results = {}
        shares = self.shares
        for model_id, model in self.models.items():
            if only is not None and model._model_id != only:
                continue
            keys = [key for key in shares if key[0] == model_id]
            calls = [(address, {"optimizer": self._spec(
                shares[(mid, address)], action, **extra,
                **(per_share(shares[(mid, address)]) if per_share else {}))})
                for mid, address in keys]
            replies = model._hub.request_all(calls, "step", what=f"optimizer {action}")
            if action in ("step", "load"):  # the shares exist now
                model._hub.made_shares.add(self.id)
            results.update({key: r.get("result") for key, r in zip(keys, replies)})
        return results

    def _spec(self, names: list[str], action: str, **extra) -> dict:
        """The ``optimizer`` field of a step message for the share holding ``names``."""
        return {"id": self.id, "class": self.class_name, "kwargs": dict(self.kwargs),
                "params": names, "action": action, **extra}

    def state_by_name(self) -> tuple[dict, list]:
        """({parameter name: {key: value}}, param_groups' hyperparameters) of all shares."""
        state, groups = {}, []
        for result in self._each("state").values():
            state.update(result["state"])
            groups = result["param_groups"]
        return state, groups

    def load_state_by_name(self, state: dict, param_groups: list) -> None:
        """Restore what ``state_by_name`` gave (each share takes its parameters' part)."""
        self._each("load", per_share=lambda names: {"state": {
            "state": {n: s for n, s in state.items() if n in names},
            "param_groups": param_groups}})

    def step(self) -> None:
        """As the local optimizer's. The first step makes each worker's share (and says at
        once if a worker refuses it); later ones ride with the model's next forward, or go
        before any other request to its workers (a read of the weights sees them)."""
        for model in self.models.values():
            if self.id in model._hub.made_shares:
                model._hub.defer(self._calls(model, "step"))
            else:
                self._each("step", only=model._model_id)
        self.steps += 1
        if self.checkpoint_every and self.steps % self.checkpoint_every == 0:
            (model,) = self.models.values()
            model.save(self.checkpoint, optimizer=self, step=self.steps)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As the local optimizer's. Sent with the model's next forward (which every stage
        sees before it computes a gradient), or before any other request to its workers:
        a training step pays no round trip for it."""
        for model in self.models.values():
            model._hub.defer(self._calls(model, "zero_grad", set_to_none=set_to_none))

    def _calls(self, model, action: str, **extra) -> dict:
        """{address: optimizer_call} of ``action`` on the shares of ``model``."""
        return {address: self._spec(names, action, **extra)
                for (model_id, address), names in self.shares.items()
                if model_id == id(model)}

