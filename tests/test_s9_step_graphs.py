"""The forwards a pipelined training step keeps on a stage for their backward (workers.limits
``keep_step_graph``), without sockets: they count against the client's ``--max-graph-mb``
with its kept forward graphs, either way round, and go at their backward and at the step's
end. Before, a step kept them uncounted (the integration test is
tests/integration/test_s9_step_graph_bytes.py)."""
import pytest
from test_client_limits import _stage, _Worker

import disthook as torch
from disthook import nn
from workers.state import Context


def _forward(lin, rows: int):
    x = torch.randn(rows, 256)
    return x, torch.tanh(lin(x))


def test_a_steps_forwards_count_with_the_clients_graphs_and_go_with_the_step():
    lin, worker = nn.Linear(256, 256), _Worker({})
    st = _stage(lin)
    worker.max_graph_bytes = 768 << 10
    worker.keep_step_graph(st, b"x", "s1", 0, _forward(lin, 256))  # 256 KiB in, out saved
    held = worker.step_graph_bytes()[b"x"]
    assert held == 2 * 256 * 1024  # its input and tanh's output (saved), not the weights
    with pytest.raises(RuntimeError, match=r"hold 0\.5 MiB, and this call's 0\.5 MiB more "
                                           r"would pass the cap of 0\.8 MiB \(--max-graph-mb\)"):
        worker.keep_step_graph(st, b"x", "s1", 1, _forward(lin, 256))
    x, out = _forward(lin, 256)  # a forward's graph meets the step's bytes too
    with pytest.raises(RuntimeError, match=r"\(--max-graph-mb\)"):
        worker.check_graph_bytes(st, b"x", Context(b"x", [x], out, [], 0.0))
    worker.check_graph_bytes(st, b"y", Context(b"y", [x], out, [], 0.0))  # another client's
    assert worker.step_graph_bytes("m") == {b"x": held}
    worker.drop_step_graph("m", b"x", "s1", 0)  # its backward ran
    worker.keep_step_graph(st, b"x", "s1", 1, _forward(lin, 256))
    worker.drop_step_graph("m", b"x", "s1")  # the step ended
    assert worker.step_graph_bytes() == {} and worker.state.step_graphs == {}
