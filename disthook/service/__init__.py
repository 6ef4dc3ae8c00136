"""What every process of a cluster shares, client, coordinator and worker alike (the
client's own side is ``disthook.distributed``; the roles are ``coordinator`` and
``workers``):

- ``loop``: the request loop of the coordinator and worker processes (``Service``);
- ``rpc``: requests with deadlines, and the errors remote calls end with;
- ``security``: key directories, CURVE encryption and which peers the servers accept;
- ``endpoint``: the one parser of addresses, the default port, the address a worker
  advertises;
- ``values``: hooks' values and module attributes as data, the form they travel in;
- ``hook_kinds``: the table of hook kinds (register method, options, what a hook sees);
- ``worker_hooks``: hooks that run inside the worker (capture, clamp_grad, scale_grad,
  check_finite, by_path), which a client names as ``disthook.distributed.hooks``.
"""
