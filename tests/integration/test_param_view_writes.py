"""A view of a deployed parameter or buffer changed in place (``w[...] += update`` as ROME
applies its rank-one edit, ``w[:, j].zero_()`` to ablate a unit, ``p.data[0] += 1``): in one
process a basic index is a view, so the change reaches the tensor. On a deployed model it
reaches the worker, as ``w[i] = new value``, with one process's values and errors; an
advanced index stays a copy, as in one process."""
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def made():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))


def edits(model):
    w, b, running = model[0].weight, model[0].bias, model[1].running_mean
    seen = []
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        w[0] += 1
    with torch.no_grad():
        w[...] += torch.ones(3, 2)  # augmented assignment: the view, then setitem
        w[:, 1] *= 2
        w[2].zero_()
        view = w[1]
        view.fill_(3)
        view.add_(1)  # a second change of the same view goes through too
        seen.append(view.tolist())
        w.mul_(2)  # the view is of the tensor as it is now, not as it was read
        view.add_(1)
        seen.append(view.tolist())
        w[[0, 1]].zero_()  # an advanced index is a copy: nothing changes
        b[1:] -= 5
    model[2].weight.data[0].copy_(torch.tensor([7.0, 8.0, 9.0]))
    running[:2].add_(0.5)
    return seen + [t.detach().tolist() for t in (w, b, model[2].weight, running)]


def test_in_place_changes_of_a_deployed_tensors_view_reach_its_worker(cluster):
    expected = edits(made())
    remote = cluster.deploy(made(), stages=2)
    try:
        assert edits(remote) == expected
        local = remote.to_local()  # the workers' values
        assert [local[0].weight.tolist(), local[1].running_mean.tolist()] == [
            expected[2], expected[5]]
    finally:
        remote.close()
