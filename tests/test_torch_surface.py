"""The torch modules real programs import: accelerator, backends, __version__, futures,
distributions (values against torch), multiprocessing, nn.parallel."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import disthook
from disthook import accelerator, backends, futures
from disthook import distributions as dd
from disthook import multiprocessing as dmp
from disthook.nn import parallel
from disthook.torch_version import TORCH_VERSION, TorchVersion


def test_accelerator_answers_cpu_only():
    assert accelerator.is_available() is False
    assert accelerator.current_accelerator() is None and accelerator.device_count() == 0
    for call in (accelerator.current_device_index, accelerator.synchronize,
                 lambda: accelerator.set_device_index(0)):
        with pytest.raises(RuntimeError, match="^Cannot access accelerator device when none "
                           "is available.$"):
            call()


def test_accelerator_matches_torch_cpu_build():
    torch = pytest.importorskip("torch")
    assert accelerator.is_available() == torch.accelerator.is_available()
    assert accelerator.current_accelerator() == torch.accelerator.current_accelerator()
    assert accelerator.device_count() == torch.accelerator.device_count()


def test_backends_answer_cpu_only_and_keep_flags():
    assert not backends.cudnn.is_available() and backends.cudnn.version() is None
    assert not backends.mps.is_available() and not backends.mps.is_built()
    assert not backends.cuda.is_built()
    backends.cudnn.benchmark = True
    backends.cuda.matmul.allow_tf32 = True
    assert backends.cudnn.benchmark and backends.cuda.matmul.allow_tf32
    backends.cudnn.benchmark = False
    backends.cuda.matmul.allow_tf32 = False


def test_version_compares_by_number():
    v = TorchVersion(TORCH_VERSION)
    assert v == "2.13.0+disthook" and v != "2.13.0" and v != (2, 13, 0)
    assert v >= "2.0" and v >= "2.9" and v > "2.12.1" and v >= (2, 13) and v < "2.14"
    assert v < "3" and not v < "2.13"
    assert v.split("+")[0] == "2.13.0" and isinstance(v, str)
    packaging = pytest.importorskip("packaging.version")
    parsed = packaging.Version(v)
    assert parsed.release == (2, 13, 0) and parsed.local == "disthook"
    assert parsed >= packaging.Version("2.13")


def test_version_compares_like_torchs():
    torch = pytest.importorskip("torch")
    torch_v = torch.__version__.split("+")[0]
    if torch_v != "2.13.0":
        pytest.skip("the installed torch is not 2.13.0")
    mine = TorchVersion(TORCH_VERSION)
    for other in ("2.0", "2.9", "2.13", "2.13.0", "2.14", (2, 9), (2, 13, 0), "3.0"):
        assert (mine >= other, mine < other, mine == other) == (
            torch.__version__ >= other, torch.__version__ < other, torch.__version__ == other)


# ---- futures --------------------------------------------------------------------------------

def test_future_result_then_and_collect():
    fut = futures.Future()
    doubled = fut.then(lambda f: f.value() * 2)
    seen = []
    fut.add_done_callback(lambda f: seen.append(f.value()))
    assert not fut.done()
    threading.Timer(0.01, fut.set_result, (21,)).start()
    assert fut.wait() == 21 and doubled.wait() == 42 and seen == [21]
    with pytest.raises(RuntimeError, match="^Future can only be marked completed once.$"):
        fut.set_result(1)
    other = futures.Future()
    other.set_result("x")
    assert futures.wait_all([fut, other]) == [21, "x"]
    assert [f.value() for f in futures.collect_all([fut, other]).wait()] == [21, "x"]


def test_future_exceptions_travel():
    fut = futures.Future()
    chained = fut.then(lambda f: f.value() + 1)
    fut.set_exception(ValueError("bad"))
    with pytest.raises(ValueError, match="^bad$"):
        fut.wait()
    with pytest.raises(ValueError, match="^bad$"):
        chained.wait()
    with pytest.raises(RuntimeError, match="not completed yet"):
        futures.Future().value()


# ---- distributions --------------------------------------------------------------------------

def _both(fn, atol=1e-6):
    torch = pytest.importorskip("torch")
    want = fn(torch, torch.distributions).detach().numpy()
    got = fn(disthook, dd).detach().numpy()
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda T, D: D.Normal(T.tensor([0.0, 1.0]), T.tensor([1.0, 2.0])).log_prob(
        T.tensor([[0.5, -1.0], [2.0, 3.0]])),
    lambda T, D: D.Normal(T.tensor([0.0, 1.0]), T.tensor([1.0, 2.0])).entropy(),
    lambda T, D: D.Normal(0.0, 2.0).cdf(T.tensor([0.3, -1.0])),
    lambda T, D: D.Normal(T.tensor([0.0, 1.0]), 3.0).stddev,
    lambda T, D: D.Categorical(probs=T.tensor([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])).log_prob(
        T.tensor([2, 0])),
    lambda T, D: D.Categorical(logits=T.tensor([[0.2, 1.3, -0.5], [0.1, 0.1, 0.8]])).entropy(),
    lambda T, D: D.Categorical(logits=T.tensor([0.2, 1.3, -0.5])).log_prob(
        T.tensor([[0, 1], [2, 2]])),
    lambda T, D: D.Categorical(logits=T.tensor([0.2, 1.3, -0.5])).probs,
    lambda T, D: D.Bernoulli(probs=T.tensor([0.2, 0.9])).log_prob(T.tensor([1.0, 0.0])),
    lambda T, D: D.Bernoulli(logits=T.tensor([0.2, -1.9])).entropy(),
    lambda T, D: D.Bernoulli(probs=T.tensor([0.2, 0.9])).entropy(),
    lambda T, D: D.Bernoulli(logits=T.tensor([0.2, -1.9])).variance,
])
def test_distribution_values_match_torch(fn):
    _both(fn, atol=2e-7)


def test_distribution_gradients_match_torch():
    torch = pytest.importorskip("torch")
    results = []
    for T, D in ((torch, torch.distributions), (disthook, dd)):
        loc = T.tensor([0.5, -1.0], requires_grad=True)
        logits = T.tensor([0.1, 0.7, -0.3], requires_grad=True)
        loss = (D.Normal(loc, 1.5).log_prob(T.tensor([1.0, 1.0])).sum()
                + D.Categorical(logits=logits).entropy()
                + D.Bernoulli(logits=logits).log_prob(T.tensor([1.0, 0.0, 1.0])).sum())
        loss.backward()
        results.append((loc.grad.numpy(), logits.grad.numpy()))
    for want, got in zip(results[0], results[1]):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_sampling_shapes_and_frequencies():
    disthook.manual_seed(0)
    normal = dd.Normal(disthook.zeros(3), disthook.ones(3))
    assert normal.sample((5,)).shape == (5, 3) and normal.batch_shape == (3,)
    loc = disthook.zeros(2, requires_grad=True)
    draw = dd.Normal(loc, 1.0).rsample((4,))
    assert draw.requires_grad and not dd.Normal(loc, 1.0).sample().requires_grad
    cat = dd.Categorical(probs=disthook.tensor([0.2, 0.3, 0.5]))
    draws = cat.sample((4000,))
    assert draws.dtype == disthook.int64 and draws.shape == (4000,)
    freq = np.bincount(draws.numpy(), minlength=3) / 4000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.03)
    bern = dd.Bernoulli(probs=disthook.tensor([0.2, 0.9])).sample((4000,))
    np.testing.assert_allclose(bern.mean(0).numpy(), [0.2, 0.9], atol=0.03)


def test_distribution_errors_name_what_is_provided():
    with pytest.raises(ValueError, match="^Either `probs` or `logits` must be specified, but "
                       "not both.$"):
        dd.Categorical()
    # every torch.distributions name is provided: none refuses
    from disthook._surface.refusal import is_refused

    assert not any(is_refused(getattr(dd, name)) for name in dd.__all__)


# ---- multiprocessing and nn.parallel --------------------------------------------------------

def _put_square(index, queue):
    queue.put((index, index * index))


def test_multiprocessing_spawn_and_queues():
    ctx = dmp.get_context("spawn")
    queue = ctx.SimpleQueue()
    dmp.spawn(_put_square, args=(queue,), nprocs=2)
    assert sorted(queue.get() for _ in range(2)) == [(0, 0), (1, 1)]
    assert "file_system" in dmp.get_all_sharing_strategies()
    dmp.set_sharing_strategy("file_system")
    assert dmp.get_sharing_strategy() == "file_system"
    dmp.set_sharing_strategy("file_descriptor")


def test_data_parallel_runs_the_module_and_ddp_says_why_not():
    inner = disthook.nn.Linear(2, 1)
    wrapped = parallel.DataParallel(inner)
    x = disthook.ones(3, 2)
    assert disthook.equal(wrapped(x), inner(x))
    assert list(wrapped.state_dict()) == ["module.weight", "module.bias"]
    assert disthook.equal(parallel.data_parallel(inner, x), inner(x))
    with pytest.raises(RuntimeError, match="^DistributedDataParallel is not supported by "
                       "disthook: it needs torch.distributed process groups"):
        parallel.DistributedDataParallel(inner)
    # as torch without GPUs: device_ids are ignored
    assert parallel.DataParallel(inner, device_ids=[0, 1]).device_ids == []


def test_torch_distributed_says_its_process_groups_are_not_there():
    """Programs ask before they use process groups (is_available() and is_initialized()):
    disthook answers as a torch build without them, so they take their one-process path."""
    import disthook.distributed as dist

    assert dist.is_available() is False and dist.is_initialized() is False
