"""A GIN's graph pooling deployed (R14): the client's forward pools the placed layers' outputs
with ``scatter_reduce`` / ``index_reduce_``, ops the worker runs where the values live. The
worker had not loaded their module (``disthook.ops.gather_reduce`` loads on first use) and
refused the op as "of another version of disthook"."""
import subprocess
import sys

import numpy as np
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class GINConv(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1, dtype=torch.float64))
        self.mlp = nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o)).double()

    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = torch.zeros_like(x).scatter_add_(0, dst.unsqueeze(-1).expand(-1, x.size(1)), x[src])
        return self.mlp((1 + self.eps) * x + agg)


class GIN(nn.Module):
    """Two message-passing layers placed on the workers; pooling per graph on the client."""

    def __init__(self):
        super().__init__()
        self.c1 = GINConv(3, 4)
        self.c2 = GINConv(4, 4)
        self.head = nn.Linear(8, 2).double()

    def forward(self, x, edge_index, batch):
        h = self.c2(torch.relu(self.c1(x, edge_index)), edge_index)
        idx = batch.unsqueeze(-1).expand_as(h)
        mean = torch.zeros(2, 4, dtype=h.dtype).scatter_reduce(0, idx, h, "mean",
                                                               include_self=False)
        top = torch.full((2, 4), -1e9, dtype=h.dtype).index_reduce_(0, batch, h, "amax",
                                                                    include_self=False)
        return self.head(torch.cat([mean, top], 1))


def _make():
    torch.manual_seed(0)
    return GIN()


def test_graph_pooling_on_placed_outputs_runs_on_the_worker(cluster):
    # 12 nodes: a placed layer's output (12 x 4 doubles) is over the size a worker sends
    # with its description, so the pooling ops on it run on the worker
    x = torch.tensor(np.random.default_rng(0).standard_normal((12, 3)))
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 3, 5, 6, 7, 8, 9, 10, 11],
                               [1, 0, 3, 4, 2, 2, 6, 7, 8, 9, 10, 11, 5]])
    batch = torch.tensor([0] * 5 + [1] * 7)

    def run(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        outs = []
        for _ in range(3):  # a training loop
            out = model(x, edge_index, batch)
            opt.zero_grad()
            out.pow(2).sum().backward()
            opt.step()
            outs.append(out.detach().numpy())
        return outs, model.c1.mlp[0].weight.detach().numpy()

    got, want = deployed_run(cluster, _make, run)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)


def test_an_op_of_a_module_not_loaded_yet_is_found_and_nothing_else_is_imported():
    code = ("import sys, disthook\n"
            "from disthook.service import op_calls\n"
            "assert 'disthook.ops.gather_reduce' not in sys.modules\n"
            "f = op_calls.op_function('disthook.ops.gather_reduce.ScatterReduce', None)\n"
            "assert 'disthook.ops.gather_reduce' in sys.modules\n"
            "for name in ('json.JSONDecoder', 'disthook.ops.nosuch.Op', 'os.system',\n"
            "             'disthook.ops.gather_reduce.nosuch'):\n"
            "    try:\n"
            "        op_calls.op_function(name, None)\n"
            "    except LookupError:\n"
            "        pass\n"
            "    else:\n"
            "        raise AssertionError(name)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.stdout == "ok\n", out.stderr
