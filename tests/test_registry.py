"""The record of a model shared by name, without sockets: its structure (the spec with shapes
and dtypes for arrays) makes a twin of the tree with zero-memory, read-only placeholders of
the same paths, classes, shapes, dtypes and ties; the record passes wire's schema; the
coordinator's registry refuses a live name, forgets a deployer or client whose connection
closes, and says which names exist."""
import sys
from pathlib import Path

import pytest

import disthook as torch
from disthook import nn, wire
from disthook.distributed import registry
from disthook.distributed.spec import SpecError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gpt  # examples/gpt.py: tied head, blocks in a ModuleList, buffers


def tensors(module):
    return [*module.named_parameters(remove_duplicate=False),
            *module.named_buffers(remove_duplicate=False)]


def test_structure_round_trip_gives_a_twin_of_the_tree_without_weights():
    torch.manual_seed(0)
    model = gpt.GPT(gpt.Config())
    struct = registry.structure(model)
    assert "data" not in repr(struct)  # no array crossed
    twin = registry.twin(struct)
    assert type(twin) is gpt.GPT
    assert [(n, type(m)) for n, m in twin.named_modules()] == \
        [(n, type(m)) for n, m in model.named_modules()]
    assert [(n, tuple(t.shape), t._data.dtype, t.requires_grad) for n, t in tensors(twin)] \
        == [(n, tuple(t.shape), t._data.dtype, t.requires_grad) for n, t in tensors(model)]
    assert twin.lm_head.weight is twin.transformer.wte.weight  # ties kept
    for _, t in tensors(twin):
        assert t._data.strides == (0,) * t._data.ndim  # one zero, broadcast: no memory
        assert not t._data.flags.writeable  # nothing writes into a placeholder
        assert not t._data.any()
    assert twin.training == model.training and vars(twin.cfg) == vars(model.cfg)


class LambdaHolder(nn.Module):
    """A module with a lambda over its child: made again by calling its class."""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.act = lambda x: self.lin(x).tanh()

    def forward(self, x):
        return self.act(x)


def test_a_module_with_lambdas_is_published_as_code_and_its_twin_made_only_with_trust():
    torch.manual_seed(0)
    model = nn.Sequential(LambdaHolder(3), nn.Linear(3, 2))
    described = registry._description(model)
    assert described["structure"] is None and isinstance(described["code"], bytes)
    found = {"class": "torch.nn:Sequential", "owner": "alice", **described}
    with pytest.raises(PermissionError, match=r"came with its deployer's code .* "
                                              r"attach\('m', trust_code=True\) if you trust "
                                              r"'alice'"):
        registry._code_twin(found, "m", trust_code=False)
    twin = registry._code_twin(found, "m", trust_code=True)
    assert type(twin[0]) is LambdaHolder and callable(twin[0].act)
    assert not any(t._data.flags.writeable for _, t in tensors(twin))  # placeholders
    assert twin[0].act.__closure__[0].cell_contents is twin[0]  # over the twin's own child
    assert [tuple(t.shape) for _, t in tensors(twin)] == \
        [tuple(t.shape) for _, t in tensors(model)]


def test_a_class_the_attaching_client_cannot_import_is_named_with_the_fix():
    struct = registry.structure(nn.Sequential(nn.Linear(2, 2)))
    struct["children"]["0"]["class"] = "not_installed_here:Net"
    with pytest.raises(SpecError, match=r"cannot make a twin of the model published as 'm'.*"
                                        r"not_installed_here:Net.*import the module"):
        registry.twin(struct, name="m")


def published(name="m", model="Sequential-1", worker="w0"):
    net = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    return {"name": name, "model": model, "class": "disthook.nn.modules.container:Sequential",
            "owner": "client-1", "created": 1.0, "writable": False,
            "workers": [{"stage": 0, "worker": worker, "address": "tcp://127.0.0.1:1"}],
            "layout": {"kind": "chain", "stages": [["0", "1"]], "split": [""], "client": [],
                       "placement": None, "chunks": 1, "schedule": "gpipe"},
            "structure": registry.structure(net)}


def test_the_record_travels_as_wire_says():
    msg = wire.decode(wire.encode("publish", {"record": published()}))
    assert msg["record"]["structure"]["children"]["0"]["params"]["weight"] == {
        "requires_grad": True, "shape": [3, 2], "dtype": "<f4"}
    bad = {**published(), "layout": {**published()["layout"], "kind": "ring"}}
    with pytest.raises(wire.WireError, match="kind must be one of"):
        wire.decode(wire.encode("publish", {"record": bad}))


@pytest.fixture
def coordinator():
    from coordinator.server import Coordinator

    c = Coordinator("tcp://127.0.0.1:0")
    c.on_register(wire.Message("register", fields={"worker": "w0", "pid": 1,
                                                   "address": "tcp://127.0.0.1:1"}), b"worker")
    yield c
    c.close()


def ask(coordinator, msg_type, sender, **fields):
    return getattr(coordinator, f"on_{msg_type}")(wire.Message(msg_type, fields=fields), sender)


def test_the_coordinator_refuses_a_live_name_and_forgets_who_is_gone(coordinator):
    ask(coordinator, "publish", b"alice", record=published())
    # named by the coordinator (without keys), never by the identity the client claims
    with pytest.raises(PermissionError, match="'m' is taken.*published by client 1 "):
        ask(coordinator, "publish", b"bob", record=published(model="Sequential-2"))
    ask(coordinator, "attach", b"bob", name="m", model="Sequential-1", client="bob-hub")
    (listed,) = ask(coordinator, "models", b"carol")
    assert listed["live"] and [a["client"] for a in listed["clients"]] == ["client 2"]
    assert "structure" not in listed and listed["stages"][0]["alive"]
    with pytest.raises(LookupError, match=r"no model is published as 'x'.*published: 'm'"):
        ask(coordinator, "lookup", b"bob", name="x")
    coordinator._peers[7], coordinator._peers[8] = b"bob", b"alice"
    coordinator.on_disconnected(7)  # an attached client's connection closed
    assert ask(coordinator, "models", b"carol")[0]["clients"] == []
    with pytest.raises(PermissionError, match="only its deployer"):
        ask(coordinator, "unpublish", b"bob", name="m", model="Sequential-1")
    coordinator.on_disconnected(8)  # the deployer's: the name is free
    assert ask(coordinator, "models", b"carol") == []


def test_a_name_whose_workers_are_lost_may_be_published_again(coordinator):
    coordinator.on_register(wire.Message("register", fields={
        "worker": "gone", "address": "tcp://127.0.0.1:1", "pid": 2}), b"worker-2")
    ask(coordinator, "publish", b"alice", record=published(worker="gone"))
    coordinator.workers["gone"].last_seen -= 10 * coordinator.lost_after  # then lost
    ask(coordinator, "publish", b"bob", record=published(model="Sequential-2"))
    assert [m["model"] for m in ask(coordinator, "models", b"carol")] == ["Sequential-2"]
    assert ask(coordinator, "unpublish", b"bob", name="m", model="Sequential-2") is True
