"""Values pushed to a worker for a client's calls (``send_value``) wait in the worker's one
pipeline mailbox: a client that has workers push values no call of its takes fills only its
own share, never puts out another's training step records, and its values go with it."""
from workers.mailbox import VALUES_PER_CLIENT
from workers.state import ClientGone, WorkerState

MALLORY, ALICE = b"mallory-1", b"alice-22"


def _state(limit=4096):
    state = WorkerState("w0", mailbox_limit=limit)
    state.models.add("m")
    return state


def _value(state, client: bytes, vid: str):
    return state.pipe_arrived({"model": "m", "step": f"{client.hex()}/{vid}", "kind": "value",
                               "mb": 0, "data": None, "reason": "absent"})


def _step(state, step: str, mb: int = 0):
    return state.pipe_arrived({"model": "m", "step": step, "kind": "act", "mb": mb,
                               "data": None})


def _of(state, client: bytes) -> list[str]:
    return [k[1].partition("/")[2] for k in state.mailbox
            if k[2] == "value" and k[1].startswith(client.hex() + "/")]


def test_one_clients_values_keep_to_their_share_its_oldest_going_first():
    state = _state()
    _value(state, ALICE, "a0")
    logs = []
    for i in range(VALUES_PER_CLIENT + 10):
        logs += _value(state, MALLORY, f"v{i}")
    assert _of(state, MALLORY) == [f"v{i}" for i in range(10, VALUES_PER_CLIENT + 10)]
    assert _of(state, ALICE) == ["a0"]  # the other client's value stays
    assert len(logs) == 10 and all(log.peer == MALLORY and "v" in log.text for log in logs)
    assert "none of its calls took" in logs[0].text  # (rate-limited by peer in the shell)


def test_values_never_put_out_a_training_steps_records():
    state = _state(limit=8)
    for mb in range(4):
        _step(state, "alice-step", mb)
    for i in range(20):  # values of several clients: up to the limit, then values go first
        _value(state, bytes([65 + i % 3]) * 4, f"v{i}")
    assert [k[3] for k in state.mailbox if k[1] == "alice-step"] == [0, 1, 2, 3]
    assert len(state.mailbox) == 8


def test_a_value_finds_no_room_in_a_mailbox_full_of_steps_records():
    state = _state(limit=3)
    for mb in range(3):
        _step(state, "s", mb)
    logs = _value(state, MALLORY, "v0")
    assert _of(state, MALLORY) == [] and len(state.mailbox) == 3
    assert "mailbox full" in logs[0].text and logs[0].peer == MALLORY


def test_a_clients_values_go_when_it_goes():
    state = _state()
    _value(state, MALLORY, "v0")
    _value(state, ALICE, "a0")
    state.handle(ClientGone(MALLORY))
    assert _of(state, MALLORY) == [] and _of(state, ALICE) == ["a0"]
    _value(state, MALLORY, "v1")  # one a worker pushed as it went: nobody takes it
    assert _of(state, MALLORY) == []


def test_a_value_whose_step_names_no_hex_client_is_taken_without_a_failure():
    state = _state(limit=2)
    state.pipe_arrived({"model": "m", "step": "not hex/v", "kind": "value", "mb": 0,
                        "data": None, "reason": None})
    _step(state, "s", 0)
    logs = _step(state, "s", 1)  # the value goes first; no peer to name
    assert [k[1] for k in state.mailbox] == ["s", "s"] and logs[0].peer is None
