"""A bfloat16 model deployed on workers computes what it computes in one process: its
activations and gradients cross the wire as bfloat16 (two bytes an element), and
``bfloat16()`` of a deployed model converts it on its workers."""
import pytest
from helpers import norm_chain

import disthook as torch

pytestmark = pytest.mark.timeout(240)


def session(model, convert_after: bool):
    torch.manual_seed(1)
    x = torch.randn(5, 4).bfloat16()
    if convert_after:
        model.bfloat16()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    seen = []
    for _ in range(2):
        out = model(x)
        loss = out.float().pow(2).mean()
        loss.backward()
        seen.append((str(out.dtype), out.detach().float().tolist(), loss.item(),
                     [(str(p.grad.dtype), p.grad.float().tolist()) for p in model.parameters()]))
        opt.step()
        opt.zero_grad()
    seen.append(sorted({str(t.dtype) for t in model.state_dict().values()}))
    return seen


@pytest.mark.parametrize("convert_after", [False, True], ids=["before", "after"])
def test_a_bfloat16_model_deployed_computes_as_in_one_process(cluster_2_or_3, convert_after):
    torch.manual_seed(0)
    model = norm_chain()
    want = session(model if convert_after else model.bfloat16(), convert_after)
    assert want[0][0] == "torch.bfloat16" and "torch.bfloat16" in want[-1]
    torch.manual_seed(0)
    model = norm_chain()
    remote = cluster_2_or_3.deploy(model if convert_after else model.bfloat16(),
                                   stages=cluster_2_or_3.stages)
    try:
        got = session(remote, convert_after)
    finally:
        remote.close()
    assert got == want
