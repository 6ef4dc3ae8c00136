"""Weight averaging (``torch.optim.swa_utils``) of a deployed model, as in one process: the
averaged copy is a plain local model with the workers' values, ``update_parameters`` reads
the workers' current parameters (and buffers) each step, ``SWALR`` steps the deployed
model's optimizer, and ``update_bn`` recomputes batch-norm statistics of a deployed model on
its workers. Each result is compared with the same program run in one process."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of
from disthook.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn

CLUSTER_WORKERS = 2


def made(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def data(n=4, seed=1):
    rng = np.random.default_rng(seed)
    return [(torch.tensor(rng.standard_normal((6, 4)).astype(np.float32)),
             torch.tensor(rng.standard_normal((6, 3)).astype(np.float32))) for _ in range(n)]


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def train(model, averaged, batches, swa_lr=None):
    """A few steps of SGD, the average updated after each; with ``swa_lr`` an SWALR schedule."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = None if swa_lr is None else SWALR(opt, swa_lr=swa_lr, anneal_epochs=2)
    lrs = []
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        averaged.update_parameters(model)
        if sched is not None:
            sched.step()
            lrs.append(sched.get_last_lr())
    return lrs


@pytest.mark.parametrize("use_buffers", [False, True], ids=["params", "buffers"])
def test_ema_of_a_deployed_model_is_the_one_process_ema(cluster, use_buffers):
    model, local = made(), made()
    cluster.deploy(model, stages=2)
    try:
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9),
                            use_buffers=use_buffers)
        local_ema = AveragedModel(local, multi_avg_fn=get_ema_multi_avg_fn(0.9),
                                  use_buffers=use_buffers)
        assert deployment_of(ema.module) is None  # a plain local copy
        batches = data()
        train(model, ema, batches)
        train(local, local_ema, batches)
        state, local_state = ema.state_dict(), local_ema.state_dict()
        assert list(state) == list(local_state)
        for key in local_state:
            close(state[key], local_state[key])
        # the deployed model trained as the local one did, and is not the average
        close(model[0].weight, local[0].weight)
        assert not np.allclose(ema.module[0].weight.detach().numpy(),
                           local[0].weight.detach().numpy())
        # the workers' values are read together: one request per worker, not per tensor
        model.stats(reset=True)
        ema.update_parameters(model)
        assert model.stats()["requests"] == 2
        local_ema.update_parameters(local)
        for key, value in local_ema.state_dict().items():
            close(ema.state_dict()[key], value)
        x = data(1, seed=9)[0][0]
        ema.eval(), local_ema.eval()
        close(ema(x), local_ema(x))
    finally:
        model.close()


def test_swa_with_swalr_and_update_bn_on_a_deployed_model(cluster):
    model, local = made(), made()
    cluster.deploy(model, stages=2)
    try:
        swa, local_swa = AveragedModel(model), AveragedModel(local)
        batches = data(5, seed=2)
        lrs = train(model, swa, batches, swa_lr=0.02)
        local_lrs = train(local, local_swa, batches, swa_lr=0.02)
        assert lrs == local_lrs
        for key, value in local_swa.state_dict().items():
            close(swa.state_dict()[key], value)
        loader = [[x, y] for x, y in batches]
        update_bn(loader, swa)  # the averaged copy: local
        update_bn(loader, local_swa)
        close(swa.module[1].running_var, local_swa.module[1].running_var)
        model.eval(), local.eval()
        update_bn(loader, model)  # the deployed model itself: its batch norm on a worker
        update_bn(loader, local)
        assert not model.training and model[1].momentum == 0.1
        close(model[1].running_mean, local[1].running_mean)
        close(model[1].running_var, local[1].running_var)
        assert int(model[1].num_batches_tracked) == int(local[1].num_batches_tracked)
    finally:
        model.close()
