"""Versions of a stage's weights (workers.versions), without sockets: a write while another
client computes goes to fresh arrays, that client's job and graph keep theirs, and whoever
takes the turn computes with its own version."""
import collections

import numpy as np

import disthook as torch
from disthook import nn
from disthook.wire import Message
from workers.state import Context, Job, WorkerState
from workers.versions import Versions, before_write

WRITER, READER = b"deployer", b"reader"


class _Stage:
    def __init__(self, module):
        self.model, self.module, self.versions = "m", module, Versions(module)


def _job(client, kind="forward"):
    return Job(client, Message(kind, 1, None, {"model": "m"}), client, "m")


def _setup():
    torch.manual_seed(0)
    st = _Stage(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)))
    return st, WorkerState("w0"), st.module[0].weight


def test_a_write_while_another_client_computes_leaves_its_version_alone():
    st, state, weight = _setup()
    before = weight.detach().numpy().copy()
    reading = _job(READER)
    state.jobs.add(reading)
    kept = Context(READER, [], None, [], 0.0)
    state.keep_context("m", "c1", kept)
    writing = _job(WRITER, "set_state")
    before_write(st, state, writing)
    with torch.no_grad():
        weight.mul_(0.5)  # in place, as a write does
    np.testing.assert_array_equal(weight.detach().numpy(), before * 0.5)
    st.versions.enter(reading.version)  # the reader takes the turn
    np.testing.assert_array_equal(weight.detach().numpy(), before)
    assert kept.version is reading.version
    st.versions.enter(None)  # and the writer again
    np.testing.assert_array_equal(weight.detach().numpy(), before * 0.5)
    assert st.versions.forks == 1


def test_a_write_nobody_else_computes_with_is_made_in_place():
    st, state, weight = _setup()
    arr = weight._data
    own = _job(WRITER)
    state.jobs.add(own)  # the writer's own call sees its write (its hook's edit)
    state.keep_context("m", "c1", Context(WRITER, [], None, [], 0.0))
    before_write(st, state, _job(WRITER, "param_op"))
    assert weight._data is arr and own.version is None and st.versions.forks == 0


def test_what_a_newer_job_changed_in_place_stays_when_an_older_one_had_the_turn():
    st, state, _ = _setup()
    reading = _job(READER)
    state.jobs.add(reading)
    before_write(st, state, _job(WRITER, "step"))
    mean = st.module[1].running_mean
    mean._data = mean._data + 1.0  # a newer forward's buffer update (reassigned)
    st.versions.enter(reading.version)
    assert float(mean._data.sum()) == 0.0
    st.versions.enter(None)
    assert float(mean._data.sum()) == 2.0


def test_a_call_announced_by_an_earlier_stage_gets_the_version_before_a_write_here():
    st, state, weight = _setup()
    before = weight.detach().numpy().copy()
    st.versions.announce([(READER.hex(), "c1", None)], now=0.0)  # it waits on stage 0
    before_write(st, state, _job(WRITER, "step"))
    with torch.no_grad():
        weight.add_(1.0)
    version = st.versions.take(READER, "c1", None)  # its forward arrives here
    st.versions.enter(version)
    np.testing.assert_array_equal(weight.detach().numpy(), before)
    assert st.versions.take(READER, "c1", None) is None  # taken once; freed with its job
    st.versions.enter(None)
    np.testing.assert_array_equal(weight.detach().numpy(), before + 1.0)


def test_only_a_neighbour_stage_may_announce_a_call():
    from workers.state import MessageIn, Reply

    state = WorkerState("w0")
    out = state.handle(MessageIn(READER, Message("pin", 1, None, {
        "model": "m", "calls": [[WRITER.hex(), "c", None]]}), False))
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]
    assert state.jobs == set()


def test_a_kept_graphs_backward_after_a_write_uses_the_weights_of_its_forward():
    st, state, weight = _setup()
    lin = st.module[0]
    old = weight.detach().numpy().copy()
    x = torch.ones(1, 3, requires_grad=True)
    out = lin(x)  # the reader's forward, its graph kept
    kept = Context(READER, [x], out, [], 0.0)
    state.keep_context("m", "c1", kept)
    before_write(st, state, _job(WRITER, "step"))
    with torch.no_grad():
        weight.mul_(3.0)  # bumps the in-place count autograd checks
    st.versions.enter(kept.version)  # the reader's backward takes the turn
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), old.sum(0, keepdims=True), rtol=1e-6)
    st.versions.enter(None)
    np.testing.assert_allclose(weight.detach().numpy(), old * 3.0, rtol=1e-6)


def test_pins_a_client_writes_in_its_own_forward_are_ignored():
    from workers.versions import upstream_pins

    fields = {"model": "m", "pins": [[READER.hex(), "c1", None]]}
    own = Job(WRITER, Message("forward", 1, None, fields), WRITER, "m")
    assert upstream_pins(own) == []  # a client cannot make a worker keep versions
    carried = Job(b"w0>next>1", Message("forward", 1, None, fields), WRITER, "m")
    assert upstream_pins(carried) == [(READER.hex(), "c1", None)]


def test_a_write_down_the_pipeline_takes_pins_only_from_a_neighbour_stage():
    from workers.versions import upstream_pins

    fields = {"model": "m", "stage": 1, "parts": [[], []], "pins": [[READER.hex(), "c1", 0]]}
    sent = Job(WRITER, Message("write", 1, None, fields), WRITER, "m")
    assert upstream_pins(sent) == []  # the client's own write names no one
    carried = Job(b"w0>next>1", Message("write", 1, None, fields), WRITER, "m")
    assert upstream_pins(carried) == [(READER.hex(), "c1", 0)]


def test_a_write_passing_a_stage_carries_the_calls_of_others_there_on_as_pins():
    # a reader's forward running here and another queued behind it: both computed (or will
    # compute) this stage with the weights before the write, so the later stages keep
    # theirs for them too
    from workers.versions import note_pins

    st, state, _ = _setup()
    running = _job(READER)
    running.msg = Message("forward", 1, "c1", {"model": "m", "mb": None})
    state.jobs.add(running)
    queued = Job(READER, Message("forward", 2, "c2", {"model": "m", "mb": 1}), READER, "m")
    state.lanes[("m", READER)] = collections.deque([queued])
    mine = Job(WRITER, Message("forward", 3, "c3", {"model": "m"}), WRITER, "m")
    state.jobs.add(mine)  # the writer's own call sees its write: not a pin
    write = Job(b"w0>next>1", Message("write", 4, None, {
        "model": "m", "stage": 1, "parts": [[], []], "pins": [["ab", "c0", None]]}), WRITER, "m")
    note_pins(st, state, write)
    assert set(write.pins) == {("ab", "c0", None), (READER.hex(), "c1", None),
                               (READER.hex(), "c2", 1)}


def test_a_write_with_a_malformed_part_for_a_later_stage_changes_nothing_here():
    # the first stage checks every part before it runs its own (no half-made write)
    from workers.params import ParamHandlers

    st, state, weight = _setup()
    st.index, st.name, st.neighbours = 0, "stage 0 of m", {}
    st.check_write = lambda client, what: None
    before = weight.detach().numpy().copy()
    answers = []

    class Shell(ParamHandlers):
        def _stage(self, job):
            return st

        def _to_client(self, job, kind, fields):
            answers.append((kind, fields))

        def error_reply(self, exc, job=None):
            return {"kind": type(exc).__name__, "message": str(exc)}

    shell = Shell()
    shell.state = state
    write = Job(WRITER, Message("write", 1, None, {"model": "m", "stage": 0, "parts": [
        [{"type": "set_state", "fields": {"state": {"0.weight": np.zeros((2, 3), np.float32)}}}],
        [{"type": "set_state", "fields": {"state": 3}}]]}), WRITER, "m")
    shell.on_write(write)
    assert [kind for kind, _ in answers] == ["error"]
    assert answers[0][1]["kind"] == "WireError"
    np.testing.assert_array_equal(weight.detach().numpy(), before)
