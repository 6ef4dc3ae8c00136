"""Modules whose attributes are not data (a lambda over their submodules, a bound method, a
closure) travel as a rebuild: the worker calls the class again with the recorded constructor
arguments, then brings the new module to the client's state in place (disthook.distributed.spec)."""
import copy
import dataclasses
import math
import pickle
import sys

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn, wire
from disthook.distributed.spec import SpecError, build_module, main_script_of, module_spec


def through_wire(spec):
    frames = wire.encode("load_stage", {"model": "m", "stage": 0, "spec": spec})
    return wire.decode([bytes(f) for f in frames])["spec"]


# ---- minGPT's block, with its two kinds of config ----------------------------------------------

class CfgNode:
    """minGPT's config: a plain object with its attributes in __dict__."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


@dataclasses.dataclass
class GPTConfig:
    """nanoGPT's config: a dataclass."""

    block_size: int = 6
    n_embd: int = 8
    n_head: int = 2
    attn_pdrop: float = 0.0
    resid_pdrop: float = 0.0


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        size = config.block_size
        self.register_buffer("bias", torch.tril(torch.ones(size, size)).view(1, 1, size, size))
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(dict(  # noqa: C408 - minGPT's code as it is
            c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
            c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
            act=NewGELU(), dropout=nn.Dropout(config.resid_pdrop)))
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))  # MLP forward

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    """Blocks, an embedding tied to the output head in the constructor, a config attribute."""

    def __init__(self, config, vocab_size=11):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(vocab_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(2)])
        self.lm_head = nn.Linear(config.n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.head = lambda x: self.lm_head(x)

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.h:
            x = block(x)
        return self.head(x)


def minigpt_config():
    return CfgNode(block_size=6, n_embd=8, n_head=2, attn_pdrop=0.0, resid_pdrop=0.0)


CONFIGS = {"cfgnode": minigpt_config, "dataclass": GPTConfig}


def made(cls, config):
    """The module with values no constructor call gives (so a fresh init cannot pass)."""
    torch.manual_seed(0)
    module = cls(config)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape))
    return module


def assert_same_tensors(built, original):
    assert list(built.state_dict()) == list(original.state_dict())
    for (name, a), (_, b) in zip(built.state_dict().items(), original.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


# ---- the rebuild -----------------------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_a_block_with_a_lambda_is_rebuilt_with_its_values(config):
    block = made(Block, config())
    spec = module_spec(block)
    assert spec["rebuild"]["constructed"] == ["mlpf"]
    built = build_module(through_wire(spec))
    assert type(built) is Block and built is not block
    assert_same_tensors(built, block)
    x = torch.randn(2, 5, 8)
    np.testing.assert_array_equal(built(x).detach().numpy(), block(x).detach().numpy())
    built(x).sum().backward()  # its parameters are leaves of its own
    assert built.mlp.c_fc.weight.grad is not None and block.mlp.c_fc.weight.grad is None


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_rebuilt_lambda_uses_the_rebuilt_modules_children(config):
    block = made(Block, config())
    built = build_module(through_wire(module_spec(block)))
    x = torch.randn(2, 5, 8)
    before = built.mlpf(x).detach().numpy()
    with torch.no_grad():
        built.mlp.c_fc.weight.mul_(2.0)
    after = built.mlpf(x).detach().numpy()
    assert not np.allclose(after, before)
    np.testing.assert_array_equal(after, built.mlp.dropout(built.mlp.c_proj(
        built.mlp.act(built.mlp.c_fc(x)))).detach().numpy())
    np.testing.assert_array_equal(block.mlpf(x).detach().numpy(), before)  # the original's own


def test_the_config_arrives_as_its_class():
    built = build_module(through_wire(module_spec(made(TinyGPT, GPTConfig(n_embd=4)))))
    assert built.config == GPTConfig(n_embd=4) and type(built.config) is GPTConfig
    attn = build_module(module_spec(Block(minigpt_config()))).attn  # Block(CfgNode(...))
    assert (attn.n_head, attn.n_embd) == (2, 8)


def test_tied_weights_of_the_constructor_stay_one_object():
    model = made(TinyGPT, GPTConfig())
    spec = module_spec(model)
    assert spec["children"]["lm_head"]["params"]["weight"] == {"tied": "wte.weight"}
    assert "args" not in spec["children"]["h"]["children"]["0"]["rebuild"]  # made by TinyGPT
    built = build_module(through_wire(spec))
    assert built.wte.weight is built.lm_head.weight
    assert_same_tensors(built, model)
    idx = torch.randint(0, 11, (2, 5))
    np.testing.assert_array_equal(built(idx).detach().numpy(), model(idx).detach().numpy())


def test_ties_made_or_undone_after_construction_follow_the_client():
    untied = made(TinyGPT, GPTConfig())
    untied.lm_head.weight = nn.Parameter(untied.wte.weight.detach().clone() + 1)
    built = build_module(through_wire(module_spec(untied)))
    assert built.lm_head.weight is not built.wte.weight
    assert_same_tensors(built, untied)

    tied = made(Block, GPTConfig())
    tied.ln_2.weight = tied.ln_1.weight
    built = build_module(through_wire(module_spec(tied)))
    assert built.ln_2.weight is built.ln_1.weight
    assert_same_tensors(built, tied)


def test_parameters_are_copied_into_the_constructors_tensors():
    block = made(Block, GPTConfig())
    block.double()  # dtypes changed after construction arrive too
    built = build_module(through_wire(module_spec(block)))
    assert built.mlp.c_fc.weight.dtype is torch.float64
    assert_same_tensors(built, block)


class Gated(nn.Module):
    """A bound method and a closure over a local function, both of the constructor."""

    def __init__(self, n, *, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.act = self._gate

        def scaled(x):
            return self.lin(x) * scale

        self.scaled = scaled

    def _gate(self, x):
        return torch.sigmoid(self.lin(x)) * x

    def forward(self, x):
        return self.act(x) + self.scaled(x)


def test_a_bound_method_and_a_closure_over_a_local_function_are_rebuilt():
    gated = made(lambda n: Gated(n, scale=3.0), 4)
    spec = module_spec(gated)
    assert spec["rebuild"] == {"constructed": ["act", "scaled"], "args": [4],
                               "kwargs": {"scale": 3.0}}
    built = build_module(through_wire(spec))
    assert built.act.__self__ is built
    x = torch.randn(3, 4)
    np.testing.assert_array_equal(built(x).detach().numpy(), gated(x).detach().numpy())
    with torch.no_grad():
        built.lin.bias.add_(1.0)
    assert not np.allclose(built.scaled(x).detach().numpy(), gated.scaled(x).detach().numpy())


class Noisy(nn.Module):
    """Its constructor draws from the default generator beyond its parameters."""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.noise = torch.randn(n)  # a tensor attribute: not data, made again
        self.f = lambda x: self.lin(x) + self.noise


def test_the_constructor_leaves_the_workers_generator_as_it_was():
    noisy = Noisy(3)
    spec = module_spec(noisy)
    torch.manual_seed(7)
    torch.randn(2)
    state = torch.get_rng_state().numpy().copy()
    build_module(spec)
    np.testing.assert_array_equal(torch.get_rng_state().numpy(), state)


def test_modules_that_travel_as_data_are_not_rebuilt():
    spec = module_spec(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.LayerNorm(3)))
    assert "rebuild" not in spec and all("rebuild" not in c for c in spec["children"].values())


# ---- the record of the constructor call ------------------------------------------------------

class Base(nn.Module):
    def __init__(self, n, bias=True):
        super().__init__()
        self.lin = nn.Linear(n, n, bias=bias)


class Derived(Base):
    def __init__(self, width):
        super().__init__(width * 2, bias=False)


class Plain(Base):
    pass


class NoInit(nn.Module):
    def forward(self, x):
        return x


def test_the_outermost_constructor_call_is_recorded_and_nowhere_visible():
    assert Derived(3)._constructor_args[:2] == ((3,), {})
    assert Plain(2, bias=False)._constructor_args[:2] == ((2,), {"bias": False})
    assert NoInit()._constructor_args[:2] == ((), {})
    derived = Derived(3)
    assert "_constructor_args" not in repr(derived) and not any(
        "constructor" in k for k in derived.state_dict())
    assert module_spec(derived)["attrs"] == {}
    assert copy.deepcopy(derived)._constructor_args is None  # a copy is not a call
    assert pickle.loads(pickle.dumps(derived))._constructor_args is None


# ---- what is refused, and where --------------------------------------------------------------

class Wrapper(nn.Module):
    def __init__(self, inner, table=None):
        super().__init__()
        self.inner = inner
        self.f = lambda x: self.inner(x)


def test_constructor_arguments_that_are_not_data_are_refused_by_name():
    with pytest.raises(SpecError, match=r"attribute 'f' of the root module \(Wrapper\) is not "
                                        r"data \(a lambda .*argument 'inner' is a Linear module"):
        module_spec(Wrapper(nn.Linear(2, 2)))
    with pytest.raises(SpecError, match=r"argument 'table' is a tensor"):
        module_spec(Wrapper(None, table=torch.ones(2)))
    with pytest.raises(SpecError, match=r"argument 'table' is a value of type ndarray"):
        module_spec(Wrapper(None, table=np.ones(2)))

    class Local:
        pass

    with pytest.raises(SpecError, match=r"argument 'table' is .*Local, defined inside a "
                                        r"function"):
        module_spec(Wrapper(None, table=Local()))
    loop = CfgNode()
    loop.me = loop
    with pytest.raises(SpecError, match=r"argument 'table' is a CfgNode that holds itself"):
        module_spec(Wrapper(None, table=loop))
    with pytest.raises(SpecError, match=r"attribute 'f' of 0 \(Wrapper\)"):
        module_spec(nn.Sequential(Wrapper(nn.Linear(2, 2))))


def test_callables_the_constructor_did_not_make_are_refused():
    block = Block(GPTConfig())
    block.extra = lambda x: x
    with pytest.raises(SpecError, match=r"attribute 'extra' of the root module \(Block\) cannot "
                                        r"travel to a worker: a lambda .*set after Block was "
                                        r"constructed"):
        module_spec(block)
    with pytest.raises(SpecError, match=r"attribute 'mlpf' of 0.0 \(Block\) .*not made by "
                                        r"calling its class \(a copy"):
        module_spec(nn.Sequential(nn.ModuleList([copy.deepcopy(Block(GPTConfig()))])))


def test_a_constructed_module_unlike_the_clients_is_refused_by_path():
    spec = module_spec(made(Block, GPTConfig()))
    odd = copy.deepcopy(spec)
    odd["rebuild"]["constructed"].append("gone")
    with pytest.raises(SpecError, match=r"its constructor did not make attribute 'gone'"):
        build_module(odd)
    odd = copy.deepcopy(spec)
    odd["children"]["mlp"]["children"]["extra"] = module_spec(nn.ReLU())
    with pytest.raises(SpecError, match=r"mlp \(ModuleDict\): made again by its constructor, "
                                        r"it has submodules \[\] .* lacks \['extra'\]"):
        build_module(odd)
    odd = copy.deepcopy(spec)
    odd["children"]["mlp"]["children"]["act"] = module_spec(nn.ReLU())
    with pytest.raises(SpecError, match=r"mlp.act: the constructor of ModuleDict makes a NewGELU "
                                        r"there, the client's module has a ReLU"):
        build_module(odd)
    odd = copy.deepcopy(spec)
    odd["rebuild"]["args"] = []
    with pytest.raises(SpecError, match=r"making Block again .* failed: TypeError"):
        build_module(odd)


def test_object_classes_follow_the_allow_list_and_the_main_script(monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "/client/script.py", raising=False)
    spec = module_spec(made(Block, GPTConfig()))
    assert main_script_of(spec) is None
    spec["rebuild"]["args"][0]["object"]["class"] = "json:JSONDecoder"
    with pytest.raises(SpecError, match="importing 'json' is not allowed here"):
        build_module(spec, allow=lambda m: m != "json")
    spec["rebuild"]["args"][0]["object"]["class"] = "__main__:GPTConfig"
    assert main_script_of(spec) == "/client/script.py"  # the worker imports it for the class
    spec["rebuild"]["args"][0]["object"]["class"] = "disthook.nn:Linear"
    with pytest.raises(SpecError, match="is not a class whose objects are plain data"):
        build_module(spec)
