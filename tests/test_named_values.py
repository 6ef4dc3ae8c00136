"""A namedtuple crossing between the client and a worker (a part's ``Out(logits,
hidden)``, a ``PackedSequence``) arrives as one: of its own class where the receiving process
has that class loaded, else of a namedtuple class with the same name and fields; the wire
takes it as a hook value."""
import sys
import types
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import disthook as torch
from disthook import wire
from disthook.nn.utils.rnn import PackedSequence
from disthook.service.values import pack, unpack

Out = namedtuple("Out", "logits hidden")


class Output(OrderedDict):
    """A mapping model output, as transformers' ModelOutput (made from keywords)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class Record:
    loss: object = None
    logits: object = None


def test_a_namedtuple_comes_back_of_its_own_class():
    value = Out(torch.ones(2), (torch.zeros(1), 3))
    back = unpack(pack(value))
    assert type(back) is Out and back.hidden[1] == 3
    assert np.array_equal(back.logits.numpy(), np.ones(2))


def test_a_class_not_loaded_here_comes_back_as_a_look_alike():
    module = types.ModuleType("made_elsewhere")
    module.Pair = namedtuple("Pair", "a b")
    sys.modules["made_elsewhere"] = module
    try:
        packed = pack(module.Pair(1, torch.ones(1)))
    finally:
        del sys.modules["made_elsewhere"]  # the receiver does not have it: nothing imported
    back = unpack(packed)
    assert type(back).__name__ == "Pair" and back._fields == ("a", "b") and back.a == 1
    assert "made_elsewhere" not in sys.modules


def test_a_packed_sequence_and_the_wire():
    seq = PackedSequence(torch.ones(3, 2), torch.tensor([2, 1]), None, None)
    back = unpack(pack(seq))
    assert type(back) is PackedSequence and back.batch_sizes.tolist() == [2, 1]
    call = pack(((Out(1, torch.ones(2)),), {}))  # a part's argument, as a call sends it
    frames = wire.encode("forward", {"model": "m", "stage": 0, "inputs": [],
                                     "grad_enabled": True, "reply_to": "c", "call": call})
    (out,), _ = unpack(wire.decode([bytes(f) for f in frames])["call"])
    assert type(out) is Out and out.logits == 1 and out.hidden.shape == (2,)


def test_a_mapping_output_and_a_dataclass_come_back_of_their_classes():
    back = unpack(pack(Output(logits=torch.ones(2), hidden=None)), classes=True)
    assert type(back) is Output and list(back) == ["logits", "hidden"]
    assert back.logits.shape == (2,)
    rec = unpack(pack(Record(loss=torch.tensor(1.5), logits=(torch.ones(1),))), classes=True)
    assert type(rec) is Record and rec.loss.item() == 1.5 and rec.logits[0].shape == (1,)


made = []


@dataclass
class Noisy:
    """A loaded class whose constructor does something: a sender must not make it run."""

    a: int

    def __post_init__(self):
        made.append(self.a)


def test_where_classes_are_not_asked_for_no_constructor_a_sender_names_runs():
    data = pack(Noisy(1))
    made.clear()
    back = unpack(data)  # as a worker reads what a client sends
    assert made == [] and type(back) is not Noisy and back.a == 1 and back[0] == 1
    mapping = unpack(pack(Output(logits=1, hidden=2)))
    assert type(mapping) is dict and mapping == {"logits": 1, "hidden": 2}
    assert type(unpack(data, classes=True)) is Noisy and made == [1]


def test_a_malformed_named_value_is_refused():
    with pytest.raises(ValueError, match="not a packed named value"):
        unpack({"named": {"class": "x:Y", "fields": {"tuple": ["a"]},
                          "items": {"tuple": [1, 2]}}})
