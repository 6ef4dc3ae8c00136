"""A training step's timeline (``StepHandlers.on_train_step``'s stats, which ``disthook bench
workspan`` reads as the stage's compute) times a forward alone: what the worker notes of it
afterwards, its graph's bytes against the client's cap (``keep_step_graph``) and the memory
it holds, is not in the forward's CPU nor in the step's busy time. Before, both were, and
the workers' CPU outside compute was under-counted by their cost. Without sockets: one stage
that is both first and last, run in this process."""
import time
import types

import numpy as np
from test_client_limits import _stage, _Worker

import disthook
from disthook import nn
from workers.steps import StepHandlers

BURN_S = 0.25  # the CPU the bookkeeping takes here, per forward


class _StepWorker(StepHandlers, _Worker):
    def __init__(self, stage):
        super().__init__({})
        self.max_graph_bytes = 1 << 30
        self.stage, self.noted = stage, []
        self.captures = types.SimpleNamespace(micro_batch=None)

    def _stage(self, job):
        return self.stage

    def _run_forward(self, job, st, compute):
        return compute()

    def _run_backward_pass(self, job, st, retained, compute):
        return compute()

    def model_module_allowed(self, name: str) -> bool:
        return False

    def keep_step_graph(self, st, client, step, mb, kept):
        end = time.thread_time() + BURN_S  # slow bookkeeping: CPU of this thread
        while time.thread_time() < end:
            pass
        self.noted.append(mb)
        super().keep_step_graph(st, client, step, mb, kept)


class _Msg(dict):
    type = "train_step"


def test_a_forwards_cpu_in_the_timeline_leaves_out_the_workers_bookkeeping():
    disthook.manual_seed(0)
    lin = nn.Linear(8, 4)
    st = _stage(lin)
    vars(st).update(module=lin, shared=False, neighbours={}, params=list(lin.parameters()),
                    hook_info={}, hook_records=[], forwards=0, owner=b"c", index=0)
    worker = _StepWorker(st)
    rng = np.random.default_rng(0)
    msg = _Msg(step="s1", model="m",
               schedule=[("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1)],
               inputs=[rng.standard_normal((3, 8)).astype(np.float32) for _ in range(2)],
               targets=[rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2)],
               scales=[0.5, 0.5], loss={"function": "mse_loss"})
    def step(name: str) -> dict:
        job = types.SimpleNamespace(msg=_Msg(msg, step=name), client=b"c", spec=None,
                                    rng=None, micro_batch=None, retained=[])
        return worker.on_train_step(job)

    step("s0")  # (the first runs what a process runs once)
    stats = step("s1")
    assert worker.noted == [0, 1, 0, 1]  # the bookkeeping ran, once a forward
    forwards = [entry for entry in stats["timeline"] if entry[0] == "forward"]
    assert [entry[1] for entry in forwards] == [0, 1]
    for _, _, cpu, _, _ in forwards:  # (the thread's CPU: the machine's load aside)
        assert cpu < BURN_S / 5
    assert stats["busy"] < BURN_S  # (wall time: the two forwards' notes took 2 x BURN_S)
    assert len(stats["losses"]) == 2 and lin.weight.grad is not None


def test_memory_is_read_at_a_new_most_of_held_graphs_and_at_the_steps_end(monkeypatch):
    """``peak_rss``: the process's resident memory read at the step's start, after a forward
    that leaves the step holding more forwards' graphs than any read before (where their
    activations peak), and at its end (what it keeps: the weights' gradients). Under 1F1B's
    steady state (a forward after each backward) no read a forward, as there was before."""
    from workers import steps

    disthook.manual_seed(0)
    lin = nn.Linear(8, 4)
    st = _stage(lin)
    vars(st).update(module=lin, shared=False, neighbours={}, params=list(lin.parameters()),
                    hook_info={}, hook_records=[], forwards=0, owner=b"c", index=0)
    worker = _StepWorker(st)
    worker.keep_step_graph = super(_StepWorker, worker).keep_step_graph  # (no burn)
    reads = []

    def rss():  # what each read finds: 100 more each time
        reads.append(100 * (len(reads) + 1))
        return reads[-1]

    monkeypatch.setattr(steps, "rss_bytes", rss)
    rng = np.random.default_rng(0)
    m = 4
    for order, expected in [
            ([("forward", 0), ("backward", 0)], 3),  # start, F0, end
            ([(k, i) for i in range(m) for k in ("forward", "backward")], 3),  # steady
            ([("forward", i) for i in range(m)] + [("backward", i) for i in range(m)],
             m + 2),  # GPipe: each forward holds one more
            ([("forward", 0), ("forward", 1), ("backward", 0), ("forward", 2),
              ("backward", 1), ("forward", 3), ("backward", 2), ("backward", 3)], 4)]:
        n = 1 + max(i for _, i in order)
        msg = _Msg(step="s", model="m", schedule=order,
                   inputs=[rng.standard_normal((3, 8)).astype(np.float32) for _ in range(n)],
                   targets=[rng.standard_normal((3, 4)).astype(np.float32) for _ in range(n)],
                   scales=[1 / n] * n, loss={"function": "mse_loss"})
        reads.clear()
        job = types.SimpleNamespace(msg=msg, client=b"c", spec=None, rng=None,
                                    micro_batch=None, retained=[])
        stats = worker.on_train_step(job)
        assert len(reads) == expected and stats["peak_rss"] == max(reads)
