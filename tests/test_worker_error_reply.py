"""What a worker's error reply says of the forward's inputs: their dtypes and shapes when
the call carried arrays, nothing (no empty "was") when it carried none (its inputs were
values kept on workers)."""
from types import SimpleNamespace

import numpy as np

from disthook import nn
from workers.server import Worker


def reply(inputs):
    stage = SimpleNamespace(name="stage 1 of Net", module=nn.Linear(2, 2))
    try:
        raise ValueError("shapes do not match")
    except ValueError as exc:
        return Worker.error_reply(SimpleNamespace(id="w0"), exc,
                                  SimpleNamespace(stage=stage), inputs)


def test_the_inputs_named_when_the_call_carried_arrays():
    got = reply([np.zeros((3, 4), np.float32)])["message"]
    assert got == "shapes do not match [the input of stage 1 of Net was float32 of shape (3, 4)]"


def test_nothing_said_of_inputs_when_the_call_carried_none():
    assert reply([])["message"] == "shapes do not match"
    assert reply(None)["message"] == "shapes do not match"
