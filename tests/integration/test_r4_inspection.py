"""A deployed model inspected closely, as tools do: storage addresses (``data_ptr()``),
which tools use to find tied weights and count unique parameters (safetensors' shared-tensor
check, HF's tied-parameter search). Before, every placed parameter answered the address of
a value it fetched (one round trip each) and dropped at once, so parameters of one shape
looked tied: a silently wrong count. Each program
against the same one in one process."""
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(10, 6), nn.Linear(6, 10)
        self.mid = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 6), nn.Linear(6, 6))
        self.head.weight = self.emb.weight  # tied: one storage
        self.register_buffer("pos", torch.arange(6.0))

    def forward(self, ids):
        return self.head(self.mid(self.emb(ids)) + self.pos)


def tied():
    torch.manual_seed(0)
    return Tied()


def groups(tensors: list) -> list:
    """Which of ``tensors`` share storage, by data_ptr (the indices of each group)."""
    by_ptr = {}
    for i, t in enumerate(tensors):
        by_ptr.setdefault(t.data_ptr(), []).append(i)
    return sorted(by_ptr.values())


def test_storage_addresses_tell_tied_and_distinct_tensors_apart_as_in_one_process(cluster):
    def program(m):
        every = [t for _, t in m.named_parameters(remove_duplicate=False)]
        every += [b for _, b in m.named_buffers()]
        log = [groups(every), len({p.data_ptr() for p in m.parameters()}),
               sum(p.numel() for p in {p.data_ptr(): p for p in every}.values()),
               m.mid[1].weight.data.data_ptr() == m.mid[1].weight.data_ptr(),
               m.emb.weight.data_ptr() == m.head.weight.data_ptr()]
        before = m.mid[1].weight.data_ptr()
        m.mid[1].weight.data = torch.zeros(6, 6)  # new memory for that parameter
        log += [m.mid[1].weight.data_ptr() != before, groups(every)]
        return log

    same_logs(*deployed_run(cluster, tied, program))
