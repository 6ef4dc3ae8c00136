"""The random number generator behind rand/randn/randint and initialisers.

One numpy PCG64 generator, seeded like torch's default generator at import, so programs are
reproducible without a seed. Numbers differ from torch's (its generator is mt19937).
"""
from __future__ import annotations

import numpy as np

DEFAULT_SEED = 67280421310721  # torch.initial_seed() of a fresh process

_state = {"seed": DEFAULT_SEED, "gen": np.random.default_rng(DEFAULT_SEED)}


def manual_seed(seed: int):
    seed = int(seed)
    _state["seed"] = seed
    _state["gen"] = np.random.default_rng(seed & 0xFFFFFFFFFFFFFFFF)
    return Generator(seed)


def seed() -> int:
    s = int(np.random.SeedSequence().entropy) & 0xFFFFFFFFFFFFFFFF
    manual_seed(s)
    return s


def initial_seed() -> int:
    return _state["seed"]


def get_rng_state():
    from disthook.tensor import Tensor

    import json

    raw = json.dumps(_state["gen"].bit_generator.state).encode()
    return Tensor._make(np.frombuffer(raw, dtype=np.uint8).copy(), None, 0)


def set_rng_state(state) -> None:
    import json

    gen = np.random.default_rng()
    gen.bit_generator.state = json.loads(bytes(state._data.astype(np.uint8)).decode())
    _state["gen"] = gen


class Generator:
    """Handle returned by ``manual_seed`` (the process has one generator)."""

    def __init__(self, seed: int = DEFAULT_SEED):
        self._seed = seed

    def manual_seed(self, seed: int) -> "Generator":
        manual_seed(seed)
        self._seed = seed
        return self

    def initial_seed(self) -> int:
        return self._seed


def gen() -> np.random.Generator:
    return _state["gen"]


def uniform(a, b, shape, dtype) -> np.ndarray:
    return gen().uniform(a, b, size=tuple(shape)).astype(dtype)


def normal(mean, std, shape, dtype) -> np.ndarray:
    return gen().normal(mean, std, size=tuple(shape)).astype(dtype)
