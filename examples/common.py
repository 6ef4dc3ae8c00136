"""Shared by the examples: the command line, and the model in this process or deployed."""
import argparse
import contextlib

from disthook.distributed import DistributedOptimizer, local_cluster


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with ``--workers N`` (0, the default: everything in this process)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--workers", type=int, default=0,
                   help="deploy the model on a local cluster of N workers (default: no cluster)")
    return p


@contextlib.contextmanager
def placed(model, workers: int, **deploy_options):
    """``(model, None)`` with no workers, else ``(remote, cluster)``: the model deployed on a
    local cluster in ``min(workers, len(model))`` stages. Hooks registered on either are
    written the same way; on the remote one a Python callable runs here, in the client."""
    if workers <= 0:
        yield model, None
        return
    with local_cluster(workers) as cluster:
        yield cluster.deploy(model, stages=min(workers, len(model)), **deploy_options), cluster


def parameter(net, name: str):
    """``net``'s parameter ``name`` ("0.weight"): a Parameter (on a cluster, placed on its worker)."""
    module, _, attr = name.rpartition(".")
    return getattr(net.get_submodule(module), attr)


def optimizer(net, cluster, optimizer_class, **kwargs):
    """``optimizer_class`` over ``net``'s parameters, on their workers when deployed."""
    if cluster is None:
        return optimizer_class(net.parameters(), **kwargs)
    return DistributedOptimizer(optimizer_class, net.parameters(), **kwargs)
