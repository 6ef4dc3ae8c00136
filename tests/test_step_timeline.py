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
