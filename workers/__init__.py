"""The worker process of a disthook cluster (docs/distributed.md has the architecture).

A worker owns stages of deployed models: their modules, their parameters and the autograd
graph of each open context. Tensor and module hooks registered on what it owns fire here;
client hooks cross to the client as ``hook_event`` messages of ``disthook.wire``.

- ``state``: every decision, as plain state driven by events (no sockets, no threads);
- ``step_run``: where a stage is in a training step's schedule (plain state too);
- ``server``: the socket shell that turns messages into events and carries out the
  instructions;
- ``command_line``: the worker's command line, which starts a ``server.Worker``;
- ``runners``: the threads that take turns, so a request that waits never stops the loop;
- ``stages``: the stages held, and loading them (pickled by value, or as data);
- ``compute``, ``client_hooks``, ``params``: the requests' handlers.
- ``stage_grads``: a stage's part of a backward (its inputs' and taps' gradients).
"""
