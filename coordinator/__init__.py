"""The coordinator process of a disthook cluster: the registry of workers.

Workers register with it (id, address, pid, host) and send heartbeats; clients ask it which
workers exist, where, with which stages and whether they are alive, and may shut the cluster
down. It decides nothing about models: placement (which worker holds which stage) and
recovery after a lost worker happen on the client (``disthook.distributed.placement``,
``Deployment.recover``). It never carries activations or gradients and speaks only the
messages of ``disthook.wire``.
"""
