"""The worker's decisions driven with events alone: no sockets, no threads, no processes."""
import pytest

from disthook.distributed import schedule as schedules
from disthook.wire import Message
from workers.state import (
    ClientGone,
    Context,
    JobDone,
    Log,
    MessageIn,
    Reply,
    Resume,
    Run,
    Tick,
    WorkerState,
)
from workers.step_run import StepRun

CLIENT, OTHER, NEIGHBOUR = b"client-a", b"client-b", b"w1>prev>0"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def make_state(**kw):
    clock = Clock()
    state = WorkerState("w0", clock=clock, **kw)
    state.models.add("m")
    return state, clock


def request(state, msg_type, sender=CLIENT, req=1, ctx=None, forwarder=None, **fields):
    """``forwarder``: whether the transport says ``sender`` is a worker (by default, when it
    is NEIGHBOUR)."""
    fields.setdefault("model", "m")
    forwarder = sender == NEIGHBOUR if forwarder is None else forwarder
    return state.handle(MessageIn(sender, Message(msg_type, req, ctx, fields), forwarder))


def started(instructions):
    return [i.job for i in instructions if isinstance(i, Run)]


def resumed(instructions):
    return [i.wait for i in instructions if isinstance(i, Resume)]


def pipe(state, step, kind, mb, sender=NEIGHBOUR, reason=None):
    return request(state, "pipe", sender=sender, step=step, kind=kind, mb=mb, data=None,
                   reason=reason)


# ---- which request runs when ---------------------------------------------------------------
def test_requests_of_one_client_on_one_model_run_one_at_a_time_in_order():
    state, _ = make_state()
    (first,) = started(request(state, "forward", req=1))
    assert started(request(state, "forward", req=2)) == []  # behind the first
    assert started(request(state, "backward", req=3)) == []
    (second,) = started(state.handle(JobDone(first)))
    assert second.msg.req == 2
    (third,) = started(state.handle(JobDone(second)))
    assert third.msg.req == 3
    assert state.handle(JobDone(third)) == [] and state.lanes == {}


def test_another_client_another_model_and_reads_do_not_wait():
    state, _ = make_state()
    state.models.add("n")
    (first,) = started(request(state, "forward"))
    assert len(started(request(state, "forward", sender=OTHER))) == 1  # another client
    assert len(started(request(state, "forward", model="n"))) == 1  # another model
    for kind in ("status", "get_state", "list_hooks", "captured", "release"):
        assert len(started(request(state, kind))) == 1, kind  # reads: at once


def test_a_forward_passed_on_by_a_neighbour_is_the_clients_request():
    state, _ = make_state()
    (job,) = started(request(state, "forward", sender=NEIGHBOUR,
                             reply_to=CLIENT.hex()))
    assert job.client == CLIENT and job.sender == NEIGHBOUR and job.lane == ("m", CLIENT)


# ---- waits ------------------------------------------------------------------------------------
def test_a_hook_answer_resumes_exactly_its_wait():
    state, _ = make_state()
    (job,) = started(request(state, "forward"))
    wait = state.wait_for_client(job, CLIENT, 7, "the answer")
    late = request(state, "hook_reply", sender=CLIENT, req=8, hook=1)  # another event's
    assert late == [Reply(CLIENT, 8, "LookupError", "worker w0 has no hook event 8 waiting "
                          "for an answer (it ended, or none was sent)")]
    late_error = request(state, "error", sender=CLIENT, req=8, kind="X", message="")
    assert isinstance(late_error[0], Log)  # an error is never answered with an error
    assert resumed(request(state, "hook_reply", sender=OTHER, req=7, hook=1)) == []
    out = request(state, "hook_reply", sender=CLIENT, req=7, hook=1, result=None)
    assert resumed(out) == [wait] and wait.done and wait.outcome.req == 7
    assert state.waits == {} and job.waiting is None


def test_answers_a_job_ran_ahead_of_are_kept_beside_the_wait_it_sleeps_on():
    state, clock = make_state(hook_timeout=5.0)
    (job,) = started(request(state, "forward"))
    first = state.expect_from_client(job, CLIENT, 1, "the first answer")
    second = state.expect_from_client(job, CLIENT, 2, "the second answer")
    assert job.waiting is None  # the job computes on
    now = state.wait_for_client(job, CLIENT, 3, "the third answer")
    assert job.waiting is now
    out = request(state, "hook_reply", sender=CLIENT, req=1, hook=1)
    assert resumed(out) == [first] and first.outcome.req == 1
    assert job.waiting is now  # still asleep on its own wait
    clock.now += 6  # the one not answered times out like any wait
    resumed(state.handle(Tick(clock.now)))
    assert isinstance(second.error, TimeoutError) and "the second answer" in str(second.error)


def test_the_answers_a_job_did_not_take_go_with_it():
    state, _ = make_state()
    (job,) = started(request(state, "forward"))
    state.expect_from_client(job, CLIENT, 1, "an answer")
    state.expect_from_client(job, CLIENT, 2, "an answer")
    state.handle(JobDone(job))
    assert state.waits == {}
    late = request(state, "hook_reply", sender=CLIENT, req=2, hook=1)
    assert [type(i) for i in late] == [Reply]


def test_a_read_runs_while_a_request_waits_on_its_clients_hook():
    state, _ = make_state()
    (job,) = started(request(state, "forward"))
    state.wait_for_client(job, CLIENT, 1, "the answer")
    assert len(started(request(state, "get_state", req=2))) == 1
    assert len(started(request(state, "status", req=3))) == 1
    assert started(request(state, "forward", req=4)) == []  # its next forward: after


def test_the_hook_deadline_ends_the_wait_with_a_timeout():
    state, clock = make_state(hook_timeout=5.0)
    (job,) = started(request(state, "forward"))
    wait = state.wait_for_client(job, CLIENT, 1, "the client's answer to its forward hook")
    clock.now += 4.9
    assert resumed(state.handle(Tick(clock.now))) == []
    clock.now += 0.2
    out = state.handle(Tick(clock.now))
    assert resumed(out) == [wait]
    assert isinstance(wait.error, TimeoutError) and "forward hook" in str(wait.error)
    # and the worker's log says so (the launch console shows it)
    assert [i.text for i in out if isinstance(i, Log)] == [
        ("worker w0 waited 5 s for the client's answer to its forward hook; its request "
         "(forward from peer 1) ends with that error")]


def test_logs_name_a_peer_as_the_shell_does_or_by_number_never_by_its_identity():
    binary = b"\x00k\x8bE\x12"  # ZeroMQ's own identities are bytes like these
    state, _ = make_state()
    (job,) = started(request(state, "forward", sender=binary))
    state.wait_for_client(job, binary, 1, "the answer")
    (log,) = [i.text for i in state.handle(ClientGone(binary)) if isinstance(i, Log)]
    assert log.startswith("worker w0: peer 1 went away: 1 wait(s) ended")
    assert binary.hex() not in log and repr(binary) not in log
    state, _ = make_state(who={CLIENT: "client 3 (alice)"}.get)
    (job,) = started(request(state, "forward"))
    state.wait_for_client(job, CLIENT, 1, "the answer")
    (log,) = [i.text for i in state.handle(ClientGone(CLIENT)) if isinstance(i, Log)]
    assert log.startswith("worker w0: client 3 (alice) went away")


# ---- a client that goes away ------------------------------------------------------------------
def test_a_client_gone_ends_its_waits_drops_its_queue_and_its_graphs():
    state, _ = make_state()
    (job,) = started(request(state, "forward", req=1))
    request(state, "forward", req=2)  # queued behind it
    (other,) = started(request(state, "forward", sender=OTHER))
    wait = state.wait_for_client(job, CLIENT, 1, "the answer")
    other_wait = state.wait_for_client(other, OTHER, 1, "the answer")
    state.keep_context("m", "c1", Context(CLIENT, [], None, [], 0.0))
    state.keep_context("m", "c2", Context(OTHER, [], None, [], 0.0))
    out = state.handle(ClientGone(CLIENT))
    assert resumed(out) == [wait] and isinstance(wait.error, ConnectionError)
    assert any(isinstance(i, Log) and "went away" in i.text for i in out)
    assert set(state.contexts) == {("m", OTHER, "c2")} and not other_wait.done
    # its running job ends by itself; nothing queued behind it starts, no wait opens again
    with pytest.raises(ConnectionError, match="went away"):
        state.wait_for_client(job, CLIENT, 2, "another answer")
    assert started(state.handle(JobDone(job))) == []
    assert state.lanes == {("m", OTHER): state.lanes[("m", OTHER)]}


def test_a_peer_with_nothing_here_going_away_says_nothing():
    state, _ = make_state()
    assert state.handle(ClientGone(b"status-peer")) == []


# ---- contexts -----------------------------------------------------------------------------------
def test_contexts_expire_after_their_ttl_and_can_be_released():
    state, clock = make_state(context_ttl=10.0)
    state.keep_context("m", "old", Context(CLIENT, [], None, [], clock.now))
    clock.now += 5
    state.keep_context("m", "new", Context(CLIENT, [], None, [], clock.now))
    clock.now += 6
    out = state.handle(Tick(clock.now))
    assert [i.text for i in out if isinstance(i, Log)][0].startswith(
        "worker w0: context old of model m expired")
    assert set(state.contexts) == {("m", CLIENT, "new")}
    assert state.release("m", OTHER, ["new"]) == 0  # another client's of the same id: kept
    assert state.release("m", CLIENT, ["new", "unknown"]) == 1 and state.contexts == {}


def test_unloading_a_model_drops_its_graphs_and_mail():
    state, _ = make_state()
    state.keep_context("m", "c", Context(CLIENT, [], None, [], 0.0))
    pipe(state, "s", "act", 0)
    state.unload("m")
    assert state.contexts == {} and state.mailbox == {} and "m" not in state.models


# ---- the pipeline mailbox -------------------------------------------------------------------
def test_the_mailbox_keeps_at_most_its_limit_dropping_the_oldest():
    state, _ = make_state(mailbox_limit=3)
    for i in range(3):
        assert pipe(state, f"s{i}", "act", 0) == []
    out = pipe(state, "s3", "act", 0)
    assert "mailbox full" in out[0].text
    assert [k[1] for k in state.mailbox] == ["s1", "s2", "s3"]


def test_mail_for_no_model_here_or_a_finished_step_is_dropped():
    state, _ = make_state()
    assert request(state, "pipe", sender=NEIGHBOUR, model="other", step="s", kind="act", mb=0,
                   data=None) == []
    state.finish_step("m", "s")
    pipe(state, "s", "act", 0)
    assert state.mailbox == {}


def test_a_waiting_step_resumes_when_its_message_comes_and_can_time_out():
    state, clock = make_state(pipe_timeout=3.0)
    (job,) = started(request(state, "train_step"))
    run = StepRun("m", "s", [("recv_act", 0), ("forward", 0)])
    action = run.next(state.mailbox)
    assert action[0] == "wait"
    wait = state.wait_for_pipe(job, action[1], "the act of micro-batch 0")
    assert resumed(pipe(state, "s", "act", 0)) == [wait]
    assert run.next(state.mailbox)[:3] == ("recv", "act", 0)
    assert run.next(state.mailbox) == ("forward", 0)
    assert run.next(state.mailbox) == ("done",)
    # a wait that nothing ends
    run = StepRun("m", "t", [("recv_grad", 1)])
    wait = state.wait_for_pipe(job, run.next(state.mailbox)[1], "the grad of micro-batch 1")
    clock.now += 3.5
    assert resumed(state.handle(Tick(clock.now))) == [wait]
    assert isinstance(wait.error, TimeoutError)


def test_an_abort_from_a_neighbour_ends_the_step_where_it_waits():
    state, _ = make_state()
    (job,) = started(request(state, "train_step"))
    run = StepRun("m", "s", [("recv_act", 0), ("forward", 0)])
    wait = state.wait_for_pipe(job, run.next(state.mailbox)[1], "the act")
    assert resumed(pipe(state, "s", "abort", -1, reason="stage 0 failed")) == [wait]
    assert run.next(state.mailbox) == ("abort", "stage 0 failed")


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-batched"])
@pytest.mark.parametrize("p,m", [(2, 4), (3, 5), (4, 2)])
def test_whole_training_steps_through_every_stage(name, p, m):
    """p worker states, each walking its schedule; sends go into the next state's mailbox,
    waits end when the message comes. Every stage runs its forwards and backwards in its
    schedule's order, a backward only after its forward (and its gradient), and nothing is
    left in any mailbox or wait."""
    plan = schedules.schedule(name, p, m)
    states = [make_state()[0] for _ in range(p)]
    jobs = [started(request(s, "train_step"))[0] for s in states]
    runs = [StepRun("m", "step", plan[s]) for s in range(p)]
    blocked = [None] * p
    done = [False] * p
    ran = [[] for _ in range(p)]
    while not all(done):
        progressed = False
        for s in range(p):
            if done[s] or (blocked[s] is not None and not blocked[s].done):
                continue
            action = runs[s].next(states[s].mailbox)
            kind = action[0]
            progressed = True
            if kind == "done":
                states[s].finish_step("m", "step")
                done[s] = True
            elif kind == "wait":
                blocked[s] = states[s].wait_for_pipe(jobs[s], action[1], "mail")
            elif kind in ("forward", "backward", "weight"):
                ran[s].append(action)
            elif kind == "weight_batch":  # a run of them, as one
                ran[s].extend((kind, mb) for mb in action[1])
            elif kind == "send_act":
                resumed(pipe(states[s + 1], "step", "act", action[1]))
            elif kind == "send_grad":
                resumed(pipe(states[s - 1], "step", "grad", action[1]))
            else:
                assert kind == "recv"
        assert progressed, f"deadlock: {blocked}"
    for s in range(p):
        assert ran[s] == [a for a in plan[s]
                          if a[0] in ("forward", "backward", "weight", "weight_batch")]
        assert states[s].mailbox == {} and states[s].waits == {}


def test_an_unknown_schedule_action_is_refused():
    with pytest.raises(ValueError, match="unknown schedule action 'jump'"):
        StepRun("m", "s", [("jump", 0)]).next({})


def test_a_weight_write_never_waits_for_another_clients_call():
    """Weights are versioned (workers.versions): another client's call keeps the version
    it started with, so a write runs at once (issue 32; issue 23 held it instead)."""
    state, _ = make_state()
    started(request(state, "forward", sender=OTHER, req=1))  # e.g. parked in a slow hook
    step = {"id": 1, "class": "SGD", "kwargs": {}, "params": ["0.weight"]}
    for req, (kind, fields) in enumerate([
            ("set_state", {"state": {"0.weight": None}}),
            ("param_op", {"name": "0.weight", "op": "mul_", "args": None, "kwargs": None}),
            ("step", {"optimizer": {**step, "action": "step"}}),
            ("forward", {"optimizer_calls": [[{**step, "action": "step"}]]})], start=2):
        (write,) = started(state.handle(MessageIn(CLIENT, Message(kind, req, None, {
            "model": "m", **fields}))))
        state.handle(JobDone(write))


def test_a_change_of_mode_or_structure_waits_until_no_other_clients_call_runs():
    """What no version keeps apart (training mode, a buffer registered) changes between
    another client's calls, never inside one."""
    state, _ = make_state()
    (call,) = started(request(state, "forward", sender=OTHER, req=1))
    assert started(request(state, "train", req=2, mode=False)) == []  # held
    assert started(request(state, "get_state", req=3)) != []  # reads go on at once
    later = request(state, "forward", req=4)  # the writer's next call waits behind its write
    assert started(later) == []
    (write,) = started(state.handle(JobDone(call)))
    assert write.msg.type == "train"
    (nxt,) = started(state.handle(JobDone(write)))
    assert nxt.msg.req == 4
    state.handle(JobDone(nxt))
    state.models.add("n")  # another model's calls do not count
    started(request(state, "forward", sender=OTHER, req=5))
    (other_model,) = started(request(state, "module_op", sender=CLIENT, req=7, model="n"))
    assert other_model.model == "n"


def test_a_request_from_inside_the_clients_own_hook_runs_at_once():
    """A forward waits on its client's hook; what that client sends meanwhile comes from
    the hook, and runs as the hook's code would in one process (it would otherwise wait
    behind the forward that waits for it: a deadlock until the hook's deadline)."""
    state, _ = make_state()
    (fwd,) = started(request(state, "forward", req=1))
    assert started(request(state, "param_op", req=2)) == []  # not from a hook: in its lane
    state, _ = make_state()
    (fwd,) = started(request(state, "forward", req=1))
    state.wait_for_client(fwd, CLIENT, 7, "the answer of forward pre-hook 1")
    (edit,) = started(request(state, "param_op", req=2))
    assert edit.lane is None
    assert started(request(state, "forward", req=3)) == []  # a call still waits its turn
    assert started(request(state, "param_op", sender=OTHER, req=4)) != []  # its own lane
    # another client's hook pending makes nothing of this client's run out of turn
    state2, _ = make_state()
    (fwd2,) = started(request(state2, "forward", req=1))
    state2.wait_for_client(fwd2, OTHER, 7, "a hook of another client")
    assert started(request(state2, "param_op", req=2)) == []


# ---- who a request is from: the connection, never a field ---------------------------------
def test_a_client_naming_another_in_reply_to_is_refused_and_nothing_runs():
    state, _ = make_state()
    for msg_type in ("forward", "backward", "add_hooks", "train_step"):
        out = request(state, msg_type, sender=OTHER, reply_to=CLIENT.hex())
        (reply,) = [i for i in out if isinstance(i, Reply)]
        assert reply.to == OTHER and reply.kind == "PermissionError"
        assert "acts only as itself" in reply.message and started(out) == []
    assert state.jobs == set() and state.lanes == {}


def test_a_client_naming_itself_in_reply_to_runs_as_itself():
    state, _ = make_state()
    (job,) = started(request(state, "forward", sender=OTHER, reply_to=OTHER.hex()))
    assert job.client == OTHER and job.lane == ("m", OTHER)


def test_a_worker_looking_identity_is_no_forwarder_unless_the_transport_says_so():
    state, _ = make_state()
    out = request(state, "forward", sender=NEIGHBOUR, forwarder=False, reply_to=CLIENT.hex())
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]


def test_pipeline_messages_and_requests_only_workers_send_are_refused_from_clients():
    state, _ = make_state()
    out = pipe(state, "s", "act", 0, sender=OTHER)
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]
    assert state.mailbox == {}
    # a client aborts only its own step (or one not begun here)
    request(state, "train_step", step="s", schedule=[], reply_to=CLIENT.hex())
    out = pipe(state, "s", "abort", -1, sender=OTHER, reason="evil")
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]
    assert pipe(state, "s", "abort", -1, sender=CLIENT, reason="ctrl-c") == []
    assert ("m", "s", "abort", -1) in state.mailbox
    # and a worker carries only a client's call on: nothing else under a client's name
    out = request(state, "set_state", sender=NEIGHBOUR, reply_to=CLIENT.hex())
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]


def test_a_call_carried_for_a_client_that_went_away_is_refused():
    state, _ = make_state()
    state.handle(ClientGone(CLIENT))
    out = request(state, "forward", sender=NEIGHBOUR, reply_to=CLIENT.hex())
    assert [i.kind for i in out if isinstance(i, Reply)] == ["PermissionError"]


def test_each_client_names_its_own_contexts():
    state, _ = make_state()
    state.keep_context("m", "c", Context(CLIENT, [], None, [], 0.0))
    assert state.context("m", OTHER, "c") is None
    state.end_context("m", OTHER, "c")
    assert state.context("m", CLIENT, "c") is not None


def test_a_one_way_message_carried_for_a_client_that_went_away_is_dropped_quietly():
    """A stage carries a client's release on after the client closed (a race, not a peer
    posing as someone): nobody waits for it, so it goes without a reply or a warning; a
    carried request that has a request id is still refused, as before."""
    state, _ = make_state()
    state.handle(ClientGone(CLIENT))
    out = request(state, "release", sender=NEIGHBOUR, req=0, contexts=["c1"],
                  reply_to=CLIENT.hex())
    assert not [i for i in out if isinstance(i, Reply)]
    assert [(i.level, i.text) for i in out if isinstance(i, Log)] == [
        ("info", "worker w0: dropped release: the client it is carried for went away")]
    out = request(state, "forward", sender=NEIGHBOUR, req=7, reply_to=CLIENT.hex())
    (reply,) = [i for i in out if isinstance(i, Reply)]
    assert "went away" in str(reply)


def test_a_run_of_batched_weight_actions_comes_as_one():
    """zb-batched's W's at the end of a stage's list come in one action, the micro-batches
    in the schedule's order; a lone one comes alone."""
    run = StepRun("m", "s", [("forward", 0), ("backward", 0), ("weight_batch", 0),
                             ("forward", 1), ("backward", 1), ("forward", 2),
                             ("backward", 2), ("weight_batch", 2), ("weight_batch", 1)])
    got = [run.next({}) for _ in range(8)]
    assert got == [("forward", 0), ("backward", 0), ("weight_batch", [0]), ("forward", 1),
                   ("backward", 1), ("forward", 2), ("backward", 2), ("weight_batch", [2, 1])]
    assert run.next({}) == ("done",)


def test_a_training_step_missing_what_its_stage_needs_is_refused_by_name():
    from workers.steps import _check_step

    plan = [["forward", 0], ["backward", 0], ["forward", 1], ["backward", 1]]
    _check_step({"schedule": plan, "inputs": [1, 2]}, True, False, "stage 0")
    with pytest.raises(ValueError, match="stage 1 must carry targets, loss"):
        _check_step({"schedule": plan, "scales": [1, 1]}, False, True, "stage 1")
    with pytest.raises(ValueError, match="stage 0 must carry inputs .one per micro-batch "
                                         "of its 2"):
        _check_step({"schedule": plan, "inputs": [1]}, True, False, "stage 0")
