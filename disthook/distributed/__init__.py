"""The client side of a disthook cluster (docs/distributed.md), one module per idea.

- ``cluster``: ``local_cluster`` / ``connect`` / ``Cluster``: start or attach to a
  coordinator and its workers, list them, shut them down;
- ``placed``: a deployed model is the user's own model, placed: ``RootPlacement`` (the
  model), ``PartPlacement`` (a module on a worker), their hooks carried there,
  ``deployment_of(model)``;
- ``placing``: ``place`` / ``unplace``, which give a model its placements (its tensors
  storages on their workers) and take them away;
- ``deployment``: ``Deployment``, the deployment behind a placed model (its stages, workers,
  channel, hook table; ``save``, ``train_step``, ``recover``, ``close``...);
- ``hook_table``: ``HookTable``, the part of ``Deployment`` that registers, removes and
  lists its client hooks on the workers;
- ``deploy``: ``deploy`` and ``attached_model``, which place a model (or bind it to a
  published deployment) in place;
- ``chain``: an ``nn.Sequential``'s stages run worker to worker (micro-batches, pipelined
  ``train_step``);
- ``autograd_node``: ``RemoteBackward0``, the node whose backward crosses the stages;
- ``aliases``: the names (``torch``) under which the client imports disthook, for workers;
- ``placement``: partition, split points, worker choice, micro-batch sizes (pure);
- ``tree``: placement over the module tree: by paths, or chosen (pure);
- ``glue``: any other model's forward run on the client as written, each placed part called
  on its worker;
- ``remote_values``: ``RemoteValue``, a placed call's output kept on its worker (passed on by
  id, worker to worker; ops on it run there; fetched once when read);
- ``async_calls``: calls and backwards that return before their answer, where its form is
  known (checked when it comes);
- ``micro_batches``: ``chunks`` for a model whose forward runs on the client (a call per
  micro-batch; ``train_step`` in GPipe or 1F1B order);
- ``registry``: a published model's record, and the twin an attaching client rebuilds;
- ``channel``: the sockets to a model's stages: requests side by side, lost workers,
  batched releases of graphs and ``zero_grad`` calls;
- ``client_hooks``: serving client hooks when a worker fires them;
- ``parameters``: ``RemoteParameter`` and ``RemoteBuffer``: the model's own tensors with
  their storage on a worker;
- ``adopting``: ``adopt`` / ``adopt_buffer`` / ``release`` / ``retype``: a tensor made one
  of those in place, and a local one again;
- ``remote_grads``: what optimizers and gradient clipping do to those, where they live;
- ``optimizer``: ``DistributedOptimizer``, stepping each worker's share (any
  ``disthook.optim`` optimizer does so too for a deployed model's parameters);
- ``checkpoint``: the checkpoint layout and its file I/O;
- ``schedule``: GPipe and 1F1B schedules (pure);
- ``shipping``: placed modules pickled by value (cloudpickle) with the user's own code, to
  workers that take code; described so for checkpoints and published models that hold code;
- ``spec``: modules as data, the form in which they travel to workers that take no code;
- ``hooks``: the client's name for the hooks that run inside the worker (capture,
  clamp_grad, scale_grad, check_finite, by_path), without a round trip to the client.

What the client shares with the coordinator and the workers (the request loop, requests
and their errors, keys, addresses, values as data, hook kinds, the worker hooks) is in
``disthook.service``.
"""
from disthook.distributed import hooks
from disthook.distributed.answer_cap import AnswerTooLarge
from disthook.distributed.cluster import Cluster, WorkerInfo, connect, local_cluster
from disthook.distributed.optimizer import DistributedOptimizer
from disthook.distributed.placed import deployment_of
from disthook.distributed.registry import NameTaken, UnknownModel
from disthook.service.rpc import (
    ClusterError,
    NotACoordinator,
    RemoteError,
    RemoteTimeout,
    WorkerLost,
)
from disthook.service.security import AuthenticationError

__all__ = ["AnswerTooLarge", "AuthenticationError", "Cluster", "ClusterError", "DistributedOptimizer",
           "NameTaken", "NotACoordinator", "RemoteError", "RemoteTimeout", "UnknownModel",
           "WorkerInfo", "WorkerLost", "connect", "deployment_of", "hooks", "is_available",
           "is_initialized", "local_cluster"]


def is_available() -> bool:
    """False: torch.distributed's process groups (``init_process_group``, DDP) are not part
    of disthook, as in a torch build without them; programs that ask take their
    one-process path. disthook spreads a model with ``deploy`` instead."""
    return False


def is_initialized() -> bool:
    """False: no torch.distributed process group is ever initialized here."""
    return False
