"""State-dict hooks on the parts of a deployed model fire as ``remote.state_dict()`` and
``remote.load_state_dict()`` walk the tree, in torch's order, with torch's arguments and
results, the same as on the model in one process: a pre-hook, a post-hook that edits the
state dict, a load pre-hook that renames a legacy key, a load post-hook that sees the
incompatible keys and the weights just loaded."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Sequential(nn.Linear(4, 4),
                                                                  nn.Linear(4, 2)))


def hooked(m, log):
    inner = m[2][0]
    inner.register_state_dict_pre_hook(
        lambda mod, prefix, keep_vars: log.append(("pre", prefix, keep_vars)))

    def post(mod, state, prefix, meta):
        log.append(("post", prefix, sorted(k for k in state if k.startswith(prefix))))
        state[prefix + "note"] = torch.tensor(1.0)

    m[2]._register_state_dict_hook(post)

    def rename(state, prefix, meta, strict, missing, unexpected, errors):
        if prefix + "old_weight" in state:
            state[prefix + "weight"] = state.pop(prefix + "old_weight")
        log.append(("load-pre", prefix))

    m[0]._register_load_state_dict_pre_hook(rename)

    def after(mod, incompatible):
        log.append(("load-post", list(incompatible.missing_keys),
                    list(incompatible.unexpected_keys),
                    np.round(mod[0].weight.detach().numpy().sum(), 4).item()))
        incompatible.unexpected_keys.clear()  # the note is expected

    m[2].register_load_state_dict_post_hook(after)
    return m


def run(m):
    log = []
    hooked(m, log)
    state = m.state_dict()
    keys = list(state)
    legacy = dict(state)
    legacy["0.old_weight"] = legacy.pop("0.weight") * 2
    for k in list(legacy):
        if k.startswith("2.0."):
            legacy[k] = legacy[k] + 1
    result = m.load_state_dict(legacy)
    after = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    return log, keys, (list(result.missing_keys), list(result.unexpected_keys)), after


@pytest.mark.parametrize("stages", [2, 3])
def test_state_dict_hooks_on_remote_parts_fire_as_in_one_process(cluster, stages):
    local = model()
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        got, want = run(remote), run(local)
        assert got[0] == want[0]  # hooks, order and arguments
        assert got[1] == want[1] and "2.note" in got[1]  # keys, the post-hook's too
        assert got[2] == want[2]
        for k in want[3]:
            np.testing.assert_allclose(got[3][k], want[3][k], rtol=1e-6, err_msg=k)
        # keep_vars: the parameters themselves, here the workers' proxies
        assert remote.state_dict(keep_vars=True)["0.weight"] is remote[0].weight
    finally:
        remote.close()


def test_state_dict_hooks_registered_before_deploy_are_carried(cluster):
    local = model()
    log = []
    remote = cluster.deploy(hooked(copy.deepcopy(local), log), stages=2)
    try:
        keys = list(remote.state_dict())
        assert "2.note" in keys and [e[0] for e in log] == ["pre", "post"]
    finally:
        remote.close()
