"""Each worker's requests in its own stage's order (disthook.distributed.stage_outbox): the
orders, their replayed span, and the outbox's releases (fake sends, no processes)."""
import random

import pytest

from disthook.bench.workspan import replay
from disthook.distributed.micro_batches import issue_order
from disthook.distributed.schedule import _backward, _forward, one_f_one_b
from disthook.distributed.stage_outbox import StageOutbox, stage_order


def test_stage_orders_of_1f1b_fill_the_pipeline_then_alternate():
    assert stage_order("1f1b", 0, 2, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2),
                                            ("B", 1), ("F", 3), ("B", 2), ("B", 3)]
    assert stage_order("1f1b", 1, 2, 4) == [("F", 0), ("B", 0), ("F", 1), ("B", 1),
                                            ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert stage_order("gpipe", 1, 3, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    for p, m in ((2, 4), (3, 8), (4, 2)):
        for s in range(p):
            assert stage_order("zb-h1", s, p, m) == stage_order("1f1b", s, p, m)
            # the client issues stage 0's order
            assert stage_order("1f1b", 0, p, m) == issue_order("1f1b", p, m)


def _plan(orders: list, p: int) -> list:
    """Stage lists of disthook.distributed.schedule from per-stage F/B orders."""
    return [[a for kind, mb in orders[s] for a in (_forward if kind == "F" else _backward)(s, p, mb)]
            for s in range(p)]


@pytest.mark.parametrize("p, m, one_order", [(2, 4, 21), (3, 8, 60), (4, 16, 165)])
def test_each_stage_in_its_own_order_has_1f1bs_span(p, m, one_order):
    """Replayed with F = 1, B = 2: every stage in its own order reaches the bound
    (m + p - 1)(F + B); every stage in stage 0's order (as sent before) does not."""
    def cost(stage, kind):
        return {"forward": 1.0, "backward": 2.0}.get(kind, 0.0)

    own = _plan([stage_order("1f1b", s, p, m) for s in range(p)], p)
    assert own == one_f_one_b(p, m)
    assert replay(own, cost, 0.0)["step_s"] == (m + p - 1) * 3
    assert replay(_plan([issue_order("1f1b", p, m)] * p, p), cost, 0.0)["step_s"] == one_order


# ---- the outbox with a fake channel --------------------------------------------------------

class Program:
    """A model whose forward runs on the client over ``route`` (worker per part, in the
    forward's order), its requests sent as glue/autograd_node send them."""

    def __init__(self, route: list[str], schedule: str = "1f1b", m: int = 4):
        self.route, self.m = route, m
        self.log: list[tuple] = []  # (address, type, fields, ctx) as sent
        self.outbox = StageOutbox(self.send, schedule, len(set(route)), m)

    def send(self, address, msg_type, fields, *, req=0, ctx=None, may_hold=False):
        if self.outbox.hold(address, msg_type, fields, req, ctx, may_hold):
            return
        self.log.append((address, msg_type, fields, ctx))

    def call(self, address, ctx, arg, arg_at):
        if arg is not None and arg_at != address:  # a value from a peer: pushed first
            self.send(arg_at, "send_value", {"values": [arg], "to": address}, may_hold=True)
        ref = {"ref": arg, "requires_grad": True, **({"from_peer": True}
                                                      if arg_at != address else {})}
        self.send(address, "forward", {"call": {"list": [ref] if arg else []}}, ctx=ctx,
                  may_hold=True)

    def forward(self, i):
        prev = at = None
        for k, address in enumerate(self.route):
            self.call(address, f"f{i}.{k}", prev, at)
            prev, at = f"f{i}.{k}.0", address

    def backward(self, i):
        grad = at = None
        for k in reversed(range(len(self.route))):
            address = self.route[k]
            if grad is not None and at != address:
                self.send(at, "send_value", {"values": [grad], "to": address}, may_hold=True)
            g = {"ref": grad, "requires_grad": False, **({"from_peer": True}
                                                         if grad and at != address else {})}
            self.send(address, "backward", {"grads": [g] if grad else [None],
                                            "keep_grads": f"f{i}.{k}~"}, ctx=f"f{i}.{k}",
                      may_hold=True)
            grad, at = f"f{i}.{k}~.0", address

    def run(self, schedule: str = "1f1b", wait_at=None):
        self.sent_by = {}  # tag -> the requests sent once the program issued it
        for kind, i in issue_order(schedule, len(set(self.route)), self.m):
            self.outbox.begin((kind, i))
            (self.forward if kind == "F" else self.backward)(i)
            self.outbox.end()
            self.sent_by[(kind, i)] = len(self.log)
            if (kind, i) == wait_at:  # the program waits: a waited request
                self.send(self.route[-1], "fetch", {"values": []})
        self.outbox.drain()

    def order_run(self, address):
        """The F/B tags the worker at ``address`` got, in order (a tag where its first
        request went)."""
        out = []
        for to, kind, fields, ctx in self.log:
            if to == address and kind in ("forward", "backward"):
                tag = ("F" if kind == "forward" else "B", int(ctx[1:].split(".")[0]))
                if tag not in out:
                    out.append(tag)
        return out

    def check_dependencies(self):
        """Every request went once, after the call that made what it names and after the
        push of a value a peer sends it; a push after the call that made the value."""
        made, pushed = {}, set()
        for n, (to, kind, fields, ctx) in enumerate(self.log):
            if kind == "forward":
                assert ctx not in made
                made[ctx] = to
            if kind == "backward":
                assert made.get(ctx) == to, f"backward of {ctx} before its forward"
                made[fields["keep_grads"]] = to
            if kind == "send_value":
                (vid,) = fields["values"]
                assert made.get(vid.rpartition(".")[0]) == to, f"push of {vid} before it"
                pushed.add((vid, fields["to"]))
            refs = [r for r in fields.get("call", {}).get("list", []) + fields.get("grads", [])
                    if r]
            for r in refs:
                assert r["ref"].rpartition(".")[0] in made, f"{r} used before it was made"
                if r.get("from_peer"):
                    assert (r["ref"], to) in pushed, f"{r} used before its push"
        assert not any(self.outbox.held.values())


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_each_worker_gets_its_stages_1f1b_order(workers):
    route = [f"w{k}" for k in range(workers)]
    prog = Program(route, m=6)
    prog.run()
    prog.check_dependencies()
    for s, address in enumerate(route):
        assert prog.order_run(address) == stage_order("1f1b", s, workers, 6)
        assert prog.outbox.order_sent(address) == stage_order("1f1b", s, workers, 6)


def test_stages_follow_the_forward_not_the_names():
    """The first worker the forward reaches is stage 0, whatever its address."""
    prog = Program(["w2", "w0", "w1"], m=4)
    prog.run()
    prog.check_dependencies()
    assert prog.outbox.stage_of == {"w2": 0, "w0": 1, "w1": 2}
    assert prog.order_run("w1") == stage_order("1f1b", 2, 3, 4)


def test_a_request_that_waits_sends_all_that_is_held_first():
    prog = Program(["a", "b"], m=4)
    prog.run(wait_at=("F", 1))
    prog.check_dependencies()
    kinds = [(to, kind) for to, kind, _, _ in prog.log]
    fetch = kinds.index(("b", "fetch"))
    # every request issued before the wait went before it: F0, F1 on both workers
    before = {(to, ctx.split(".")[0]) for to, kind, _, ctx in prog.log[:fetch]
              if kind == "forward"}
    assert before == {(w, f"f{i}") for w in "ab" for i in (0, 1)}
    assert prog.order_run("a") == stage_order("1f1b", 0, 2, 4)


def test_a_forward_that_returns_to_a_worker_still_sends_everything_in_time():
    """a -> b -> a: the stages' orders cannot all be kept (a's forward 1 waits for b's,
    which 1F1B puts after b's backward 0, which waits for a's): drain sends the oldest held
    request whose dependencies went, and the orders resume after it."""
    prog = Program(["a", "b", "a"], m=4)
    prog.run()
    prog.check_dependencies()
    assert len([e for e in prog.log if e[1] in ("forward", "backward")]) == 4 * 3 * 2
    # the cycle is broken as soon as it forms, not when the step ends: once the program
    # issued backward 0, every request of forward 1 and backward 0 went
    went = [(ctx.split(".")[0], kind) for _, kind, _, ctx in prog.log[:prog.sent_by[("B", 0)]]
            if kind in ("forward", "backward")]
    assert went.count(("f1", "forward")) == 3 and went.count(("f0", "backward")) == 3


def test_gpipe_order_and_a_random_program_keep_every_dependency():
    rng = random.Random(0)
    for trial in range(30):
        route = [rng.choice("abcd") for _ in range(rng.randint(1, 6))]
        schedule = rng.choice(["1f1b", "gpipe", "zb-h1"])
        prog = Program(route, schedule, m=rng.randint(1, 5))
        prog.run(schedule, wait_at=rng.choice([None, ("F", 0), ("B", 0)]))
        prog.check_dependencies()
        assert len([e for e in prog.log if e[1] in ("forward", "backward")]) \
            == prog.m * len(route) * 2


def test_a_drain_called_while_a_request_is_sent_sends_nothing():
    """A finalizer that runs while the outbox sends (and would send its drops) finds the
    outbox busy: nothing goes twice or out of order, and the caller is told to wait."""
    prog = Program(["a", "b"], m=4)
    answers = []
    send = prog.send

    def sending(*args, **kwargs):
        if prog.outbox._sending:
            answers.append(prog.outbox.drain())
        send(*args, **kwargs)

    prog.outbox._send = sending
    prog.run()
    prog.check_dependencies()
    assert answers and not any(answers)
    assert prog.order_run("b") == stage_order("1f1b", 1, 2, 4)
