"""Checkpoints real torch made, loaded into a model deployed on 2 workers, and the deployed
model's checkpoints read by real torch: every value bit for bit against one process."""
import io

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2

BATCHES = np.random.default_rng(1).standard_normal((6, 5, 6)).astype(np.float32)


def make(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8),
                         nn.Tanh(), nn.Linear(8, 2))


def step(lib, model, opt, i) -> None:
    opt.zero_grad()
    out = model(lib.tensor(BATCHES[i, :, :4]))
    ((out - lib.tensor(BATCHES[i, :, 4:])) ** 2).mean().backward()
    opt.step()


def bits(state) -> dict:
    return {k: (str(v.dtype), tuple(v.shape), v.detach().numpy().tobytes())
            for k, v in state.items()}


@pytest.fixture(scope="module")
def torch_checkpoint(tmp_path_factory):
    """3 steps of AdamW in real torch, saved as a training script saves them."""
    model = make(torch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for i in range(3):
        step(torch, model, opt, i)
    path = tmp_path_factory.mktemp("r5") / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)
    return path


def test_a_torch_checkpoint_loads_into_a_deployed_model_and_its_state_goes_back(
        cluster, torch_checkpoint):
    ckpt = disthook.load(torch_checkpoint)
    one = make(disthook)
    one.load_state_dict(ckpt["model"])
    remote = cluster.deploy(make(disthook), stages=2)
    try:
        assert str(remote.load_state_dict(disthook.load(torch_checkpoint)["model"])) == \
            "<All keys matched successfully>"
        x = disthook.tensor(BATCHES[5, :, :4])
        remote.eval()
        one.eval()
        with disthook.no_grad():
            assert remote(x).numpy().tobytes() == one(x).numpy().tobytes()
        buf = io.BytesIO()
        disthook.save(remote.state_dict(), buf)
        buf.seek(0)
        theirs = torch.load(buf)  # real torch, weights_only=True
        assert bits(theirs) == bits(ckpt["model"])
        assert theirs._metadata == ckpt["model"]._metadata
    finally:
        remote.close()


def test_a_deployed_run_resumes_from_a_torch_checkpoint_as_one_process_does(
        cluster, torch_checkpoint):
    runs = []
    for deployed in (False, True):
        model = make(disthook)
        if deployed:
            model = cluster.deploy(model, stages=2)
        try:
            ckpt = disthook.load(torch_checkpoint)
            model.load_state_dict(ckpt["model"])
            opt = disthook.optim.AdamW(model.parameters(), lr=1e-2)
            opt.load_state_dict(ckpt["optimizer"])
            for i in range(ckpt["epoch"], 6):
                step(disthook, model, opt, i)
            buf = io.BytesIO()
            disthook.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
            buf.seek(0)
            runs.append(torch.load(buf))  # what torch reads of the resumed run
        finally:
            if deployed:
                model.close()
    one, deployed = runs
    assert bits(deployed["model"]) == bits(one["model"])
    for index, state in one["optimizer"]["state"].items():
        assert bits(deployed["optimizer"]["state"][index]) == bits(state)
    assert deployed["optimizer"]["param_groups"] == one["optimizer"]["param_groups"]
    resumed = make(torch)  # and torch takes the run over from there
    resumed.load_state_dict(deployed["model"])
    torch.optim.AdamW(resumed.parameters()).load_state_dict(deployed["optimizer"])


def test_an_old_batchnorm_state_dict_loads_into_a_deployed_model(cluster, tmp_path):
    theirs = make(torch)
    state = theirs.state_dict()
    del state["1.num_batches_tracked"]  # torch before 0.4.1 wrote BatchNorm at version 1
    state._metadata["1"]["version"] = 1
    torch.save(state, tmp_path / "old.pt")
    model = make(disthook)
    model[1].num_batches_tracked.fill_(7)
    remote = cluster.deploy(model, stages=2)
    try:
        assert remote.load_state_dict(disthook.load(tmp_path / "old.pt")).missing_keys == []
        assert remote[1].num_batches_tracked.item() == 7  # its own count, as in torch
        assert remote[1].running_var.numpy().tobytes() == \
            state["1.running_var"].numpy().tobytes()
    finally:
        remote.close()
