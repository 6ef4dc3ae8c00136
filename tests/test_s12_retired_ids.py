"""A worker remembers whose model each id it unloaded was, so that no other client loads a
model under it (clients still attached to the old model are bound to its id and would
compute with the new one, their inputs going to it). The record is bounded; before, its
oldest entry went first whoever's it was, so a client that loaded and unloaded 65536
models of its own made the worker forget another's id, and could then load under it. Now
the account that retired the most forgets its own oldest."""
import logging
import types

import pytest

from disthook import nn
from workers import stages
from workers.stages import Stage, StageHandlers


class _Worker(StageHandlers):
    id = "w1"

    def __init__(self):
        self.stages = {}
        self.state = types.SimpleNamespace(unload=lambda model: None)
        self.log = logging.getLogger("test_s12_retired_ids")

    def drop_neighbour(self, sock) -> None:
        pass


def _load_and_unload(worker, model: str, client: bytes) -> None:
    worker._check_retired(model, client)  # (what on_load_stage checks)
    st = Stage(model, 0, nn.Sequential(nn.Identity()), owner=client)
    st.keeper = client.decode()  # (its key's name, with keys)
    worker.stages[model] = st
    worker._drop(model)


def test_one_clients_churn_does_not_free_another_clients_unloaded_id(monkeypatch):
    monkeypatch.setattr(stages, "MAX_RETIRED", 64)
    worker = _Worker()
    _load_and_unload(worker, "alice-model", b"alice")
    for n in range(200):  # mallory's own models, loaded and unloaded
        _load_and_unload(worker, f"m{n}", b"mallory")
    with pytest.raises(PermissionError, match="'alice-model' was another client's model"):
        worker._check_retired("alice-model", b"mallory")  # before: forgotten, allowed
    assert len(worker._retired) <= 64
    worker._check_retired("m0", b"alice")  # mallory's oldest: forgotten (its own record)
    with pytest.raises(PermissionError):
        worker._check_retired("m199", b"alice")
    worker._check_retired("alice-model", b"alice")  # its deployer may load it again


def test_an_unloaded_models_byte_counts_go_with_it():
    # before: status's per-model counts of bytes sent (data_stats) stayed for every model
    # ever loaded, a slow growth with a worker's life over many deploys
    worker = _Worker()
    for n in range(50):
        worker.__dict__.setdefault("data_stats", {})[f"m{n}"] = {"bytes_to_peers": 8}
        _load_and_unload(worker, f"m{n}", b"alice")
    assert worker.data_stats == {}
