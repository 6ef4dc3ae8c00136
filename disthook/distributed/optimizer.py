"""``DistributedOptimizer``: an optimizer of ``disthook.optim`` over a deployed model's
parameters, with checkpoints every K steps. It is the local optimizer of its class over
those parameters, so it takes the one path every optimizer takes to a deployed model
(``remote_grads``): each worker steps its own share of it; its ``zero_grad()``, and every
``step()`` after its first, ride with the model's next forward."""
from __future__ import annotations

from disthook.distributed import remote_grads
from disthook.distributed.parameters import RemoteParameter

__all__ = ["DistributedOptimizer"]

_GROUP_KEYS = ("params", "param_names")


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
            here = sum(not isinstance(p, RemoteParameter) for p in params)
            raise TypeError(
                "DistributedOptimizer takes the parameters of a deployed model that live on "
                f"its workers; {here} of the {len(params)} given live here (a module or "
                "parameter set on the model after the deploy, say). Use the optimizer class "
                f"itself, {optimizer_class.__name__}(remote.parameters(), ...): it steps each "
                "parameter where it lives")
        self.class_name = optimizer_class.__name__
        self.kwargs = kwargs
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
        self.optimizer = optimizer_class(params, **kwargs)  # the one it steps, share by share

    def state_by_name(self) -> tuple[dict, list]:
        """({parameter name: {key: value}}, the param groups' hyperparameters)."""
        state = remote_grads.optimizer_share(self.optimizer, "state")
        by_name = {p._path: {k: remote_grads._array_of(v) for k, v in value.items()}
                   for p, value in state.items()}
        groups = [{k: v for k, v in g.items() if k not in _GROUP_KEYS}
                  for g in self.optimizer.param_groups]
        return by_name, groups

    def load_state_by_name(self, state: dict, param_groups: list) -> None:
        """Restore what ``state_by_name`` gave: the groups' hyperparameters here, each
        parameter's state in its worker's share."""
        for mine, given in zip(self.optimizer.param_groups, param_groups):
            mine.update({k: v for k, v in given.items() if k in mine and k not in _GROUP_KEYS})
        by_path = {p._path: p for g in self.optimizer.param_groups for p in g["params"]}
        remote_grads.optimizer_share(self.optimizer, "load", {
            by_path[name]: value for name, value in state.items() if name in by_path})

    def step(self) -> None:
        """As the local optimizer's. The first step makes each worker's share (and says at
        once if a worker refuses it); later ones ride with the model's next forward, or go
        before any other request to its workers (a read of the weights sees them)."""
        self.optimizer.step()
        self.steps += 1
        if self.checkpoint_every and self.steps % self.checkpoint_every == 0:
            (model,) = self.models.values()
            model.save(self.checkpoint, optimizer=self, step=self.steps)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As the local optimizer's. Sent with the model's next forward (which every stage
        sees before it computes a gradient), or before any other request to its workers:
        a training step pays no round trip for it."""
        self.optimizer.zero_grad(set_to_none=set_to_none)
