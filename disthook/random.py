"""The random number generators behind rand/randn/randint and initialisers.

Each ``Generator`` is an independent numpy PCG64 stream; ``default_generator`` is the one
used when no ``generator=`` is given. Every generator starts from torch's default seed, so
programs are reproducible without a seed. Numbers differ from torch's (its generator is
mt19937).
"""
from __future__ import annotations

import contextlib
import hashlib
import json

import numpy as np

DEFAULT_SEED = 67280421310721  # torch.initial_seed() of a fresh process
_SEED_MASK = 0xFFFFFFFFFFFFFFFF
_TORCH_CPU_STATE_SIZES = (5056, 5048)  # torch's CPU generator state, and its legacy form


class Generator:
    """One random stream: seeding or drawing from it never touches another generator."""

    def __init__(self, device="cpu") -> None:
        self._device = device
        self.manual_seed(DEFAULT_SEED)

    @property
    def device(self):
        from disthook.tensor import device

        return device(self._device)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed & _SEED_MASK)
        return self

    def seed(self) -> int:
        """Reseed from fresh entropy; returns the new seed."""
        s = int(np.random.SeedSequence().entropy) & _SEED_MASK
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The stream's state as a uint8 tensor (JSON of numpy's bit-generator state)."""
        from disthook.tensor import Tensor

        raw = json.dumps(self._rng.bit_generator.state).encode()
        return Tensor._make(np.frombuffer(raw, dtype=np.uint8).copy(), None, 0)

    def set_state(self, state) -> Generator:
        """Resume the stream from a state ``get_state`` gave (here, or saved in a file)."""
        from disthook.tensor import Tensor

        if not isinstance(state, Tensor) or state._data.dtype != np.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        raw = bytes(state._data.reshape(-1))
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = json.loads(raw.decode())
        except (ValueError, TypeError, KeyError) as e:
            made_by_torch = len(raw) in _TORCH_CPU_STATE_SIZES
            raise RuntimeError(
                f"this RNG state ({len(raw)} bytes) is "
                + ("PyTorch's (its CPU generator's mt19937 state)" if made_by_torch else
                   "not one that disthook's get_rng_state() made")
                + ": disthook draws its random numbers from numpy's PCG64, whose stream "
                "cannot continue from it. Seed with torch.manual_seed(seed) instead (a "
                "training run resumed from a checkpoint PyTorch made draws other numbers than "
                "PyTorch would anyway), or restore a state disthook saved") from e
        self._rng = rng
        return self


default_generator = Generator()


def _stream_state() -> str:
    """The default generator's state as a string: a deployed model's call carries it to the
    worker, which draws from it (dropout) and hands it back, so that the draws of a program
    are the ones it makes in one process. A state unchanged since the last string made or
    set here gives that string again, without turning it to JSON (most calls draw
    nothing)."""
    state = default_generator._rng.bit_generator.state
    if _same(_last[1], state):
        return _last[0]
    text = json.dumps(state)
    _last[:] = [text, state]
    return text


def _set_stream_state(state: str) -> None:
    bits = default_generator._rng.bit_generator
    if state == _last[0] and _same(bits.state, _last[1]):  # the stream is there already
        return
    loaded = json.loads(state)
    if type(bits).__name__ == loaded.get("bit_generator"):
        bits.state = loaded  # in place: a fresh generator costs an entropy read
    else:
        rng = np.random.default_rng()
        rng.bit_generator.state = loaded
        default_generator._rng = rng
    _last[:] = [state, default_generator._rng.bit_generator.state]


def _streams_of_parts(n: int) -> list[str]:
    """``n`` streams of their own (as ``_stream_state`` gives them) derived from the default
    generator's state without drawing from it: one for each micro-batch of a chunked call,
    or each stage of a training step, which run side by side on the workers and so cannot
    pass one stream along. The same state gives the same streams (``manual_seed`` repeats
    them); ``_after_parts(n)`` then moves this stream on, as a draw would."""
    base = _stream_state()
    return [_derived(base, i) for i in range(n)]


def _after_parts(n: int) -> None:
    """The default generator once the ``n`` streams ``_streams_of_parts(n)`` gave were drawn
    from: a stream of its own derived from the same state, so that the next call's parts
    draw other numbers, and no one else's."""
    _set_stream_state(_derived(_stream_state(), n))


def _derived(base: str, i: int) -> str:
    """Stream ``i`` made from state ``base``: a PCG64 state from their hash (a few µs; a
    SeedSequence's took 0.2 ms)."""
    digest = hashlib.sha256(f"{i}:{base}".encode()).digest()
    return json.dumps({"bit_generator": "PCG64",
                       "state": {"state": int.from_bytes(digest[:16], "little"),
                                 "inc": int.from_bytes(digest[16:], "little") | 1},
                       "has_uint32": 0, "uinteger": 0})


# the last stream state turned to text or set from text here, and that text: a call whose
# stream did not move since gives or takes the same text (the text is JSON of the state)
_last: list = [None, None]


def _same(a, b) -> bool:
    try:
        return a == b
    except ValueError:  # a bit generator whose state holds arrays (MT19937's)
        return False


def manual_seed(seed: int) -> Generator:
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, _caller: str = "fork_rng",
             _devices_kw: str = "devices", device_type=None):
    """Draws inside the block leave the default generator as it was before it (the CPU's is
    the only one to fork: there are no accelerators' generators)."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def gen(generator: Generator | None = None) -> np.random.Generator:
    """The numpy stream of ``generator``, or of the default generator."""
    return (default_generator if generator is None else generator)._rng


def uniform(a, b, shape, dtype, generator: Generator | None = None) -> np.ndarray:
    return gen(generator).uniform(a, b, size=tuple(shape)).astype(dtype)


def normal(mean, std, shape, dtype, generator: Generator | None = None) -> np.ndarray:
    return gen(generator).normal(mean, std, size=tuple(shape)).astype(dtype)
