"""The client side of a disthook cluster (see ../shared/DESIGN.md).

- ``local_cluster`` / ``connect`` / ``Cluster``: start or attach to a coordinator and its
  workers, list them, shut them down (``cluster``);
- ``remote``: ``Cluster.deploy`` and ``RemoteModel``, a model whose stages run on workers,
  with a client-side autograd node whose backward crosses the stages;
- ``spec``: modules as data, the form in which a stage travels to a worker;
- ``hooks``: hooks that run inside the worker (capture, clamp_grad, scale_grad,
  check_finite, by_path), without a round trip to the client;
- ``rpc``: requests with deadlines, and the errors remote calls end with;
- ``security``: key directories, CURVE encryption and which peers the servers accept.
"""
from disthook.distributed import hooks
from disthook.distributed.cluster import Cluster, WorkerInfo, connect, local_cluster
from disthook.distributed.remote import DistributedOptimizer
from disthook.distributed.rpc import ClusterError, RemoteError, RemoteTimeout, WorkerLost
from disthook.distributed.security import AuthenticationError

__all__ = ["AuthenticationError", "Cluster", "ClusterError", "DistributedOptimizer",
           "RemoteError", "RemoteTimeout", "WorkerInfo", "WorkerLost", "connect", "hooks",
           "local_cluster"]
