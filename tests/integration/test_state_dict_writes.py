"""A deployed model's ``state_dict()`` entries written in place change the model, as in one
process, where they share its tensors' memory: the partial-loading idiom (``own =
model.state_dict(); own[name].copy_(param)``), a change through a view of an entry, a
buffer's. Before, the entries were writable copies and the writes changed nothing, silently."""
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def run(model):
    torch.manual_seed(9)
    pretrained = {"0.weight": torch.randn(4, 3), "3.bias": torch.randn(2),
                  "1.running_mean": torch.randn(4), "head.weight": torch.ones(1)}
    own = model.state_dict()
    for name, param in pretrained.items():
        if name in own:
            own[name].copy_(param)
    own["3.weight"][0].zero_()  # a view of an entry
    own["1.running_var"].mul_(2)
    model.eval()
    state = [(k, v.numpy().copy()) for k, v in sorted(model.state_dict().items())]
    return state, model(torch.ones(2, 3)).detach().numpy()


def test_writes_into_state_dict_entries_reach_the_model(cluster):
    got, want = deployed_run(cluster, make, run)
    same_logs(got, want)
