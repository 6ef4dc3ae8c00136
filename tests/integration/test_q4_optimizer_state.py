"""``opt.state`` of an optimizer made after the deploy, whose workers step the model's
parameters, reads and writes their state there, as one process reads its optimizer's own:
Adam-state pruning (read exp_avg_sq, zero the pruned entries), an exp_avg kept across a
step (it moves), Lookahead's slow weights kept in opt.state[p], len / ``in`` / iteration,
state_dict, a deepcopy, ``del``. Before, opt.state was empty on the client (KeyError, or
silently nothing to read)."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(self.a(x).relu())


def r(t):
    return np.round(np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t,
                               dtype=np.float64), 5).tolist()


def run(model):
    out = []
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    out.append(("empty", len(opt.state), model.a.weight in opt.state))
    for i in range(2):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    p = model.a.weight
    st = opt.state[p]
    out.append(("keys", sorted(st.keys()), len(opt.state), r(st["step"])))
    m = st["exp_avg"]                       # kept across a step
    before = r(m)
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    out.append(("kept exp_avg moves", before != r(m), r(m)))
    # Adam-state pruning: the smallest second moments pruned, their state zeroed
    for q in model.parameters():
        s = opt.state[q]
        mask = s["exp_avg_sq"] < s["exp_avg_sq"].median()
        with torch.no_grad():
            q[mask] = 0
        s["exp_avg"][mask] = 0
        s["exp_avg_sq"].mul_(~mask)
    out.append(("pruned", [r(opt.state[q]["exp_avg"]) for q in model.parameters()]))
    # Lookahead-style slow weights kept in the optimizer's state
    for q in model.parameters():
        opt.state[q]["slow"] = q.detach().clone()
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    for q in model.parameters():
        slow = opt.state[q]["slow"]
        slow.add_(q.detach() - slow, alpha=0.5)
        with torch.no_grad():
            q.copy_(slow)
    out.append(("lookahead", [r(q) for q in model.parameters()],
                sorted(opt.state[model.b.bias].keys())))
    sd = opt.state_dict()
    out.append(("state_dict", sorted(sd["state"]), r(sd["state"][0]["exp_avg"])))
    c = copy.deepcopy(opt.state)
    out.append(("deepcopy", len(c), r(c[next(iter(c))]["exp_avg"]) if c else None))
    del opt.state[model.b.bias]
    out.append(("deleted", len(opt.state), model.b.bias in opt.state))
    return out



def test_optimizer_state_read_and_written_on_the_workers(cluster):
    torch.manual_seed(0)
    want = run(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = run(model)
    finally:
        model.close()
    assert want[2][1] is True and want[-1] == ("deleted", 3, False)
    for w, g in zip(want, got):
        assert g == w


def resets(model):
    """A held opt.state_dict() shows later steps (its tensors are the optimizer's state, as
    in one process); a reset of the state (opt.state = defaultdict(dict), as warm restarts
    do, or opt.state.clear()) resets it on the workers too."""
    from collections import defaultdict

    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    out = []

    def step():
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    step()
    step()
    osd = opt.state_dict()
    first = r(osd["state"][0]["exp_avg"])
    step()
    out.append(("held state_dict", first != r(osd["state"][0]["exp_avg"])))
    opt.state = defaultdict(dict)
    step()
    out.append(("assigned", r(model.a.bias), r(opt.state[model.a.bias]["step"])))
    opt.state.clear()
    step()
    out.append(("cleared", r(model.a.bias), len(opt.state)))
    return out


def test_a_held_state_dict_and_resets_of_the_state(cluster):
    torch.manual_seed(0)
    want = resets(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = resets(model)
    finally:
        model.close()
    assert want[0][1] is True and want[1][2] == 1.0
    assert got == want
