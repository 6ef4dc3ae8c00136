"""A deploying client's modules travel pickled by value (disthook.distributed.shipping): what
arrives is the module as the client holds it (a lambda over its submodules, a bound method, a
closure, its config object, its ties and dtypes), no constructor is called again, tensors'
values go as frames beside the pickle, hooks stay behind. Modules that travel as data
(disthook.distributed.spec) hold only data: one that holds code is refused by name."""
import dataclasses
import math
import os
import sys
import types

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import library, nn, wire
from disthook.distributed import shipping
from disthook.distributed.shipping import CodeError
from disthook.distributed.spec import SpecError, build_module, main_script_of, module_spec


def through_wire(module, **options):
    """``module`` as a worker gets it: pickled, sent as a load_stage message, unpickled."""
    blob, arrays = shipping.dumps(module, **options)
    frames = wire.encode("load_stage", {"model": "m", "stage": 0, "code": blob,
                                        "arrays": arrays})
    msg = wire.decode([bytes(f) for f in frames])
    return shipping.loads(msg["code"], msg["arrays"])


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
        assert (a.shape, a.dtype) == (b.shape, b.dtype), name  # (equal values broadcast)
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


# ---- what arrives ----------------------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_a_block_with_a_lambda_arrives_with_its_values(config):
    block = made(Block, config())
    built = through_wire(block)
    assert type(built) is Block and built is not block
    assert_same_tensors(built, block)
    x = torch.randn(2, 5, 8)
    np.testing.assert_array_equal(built(x).detach().numpy(), block(x).detach().numpy())
    built(x).sum().backward()  # its parameters are leaves of its own
    assert built.mlp.c_fc.weight.grad is not None and block.mlp.c_fc.weight.grad is None


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_lambda_that_arrives_uses_the_arrived_modules_children(config):
    block = made(Block, config())
    built = through_wire(block)
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
    built = through_wire(made(TinyGPT, GPTConfig(n_embd=4)))
    assert built.config == GPTConfig(n_embd=4) and type(built.config) is GPTConfig
    attn = through_wire(Block(minigpt_config())).attn  # Block(CfgNode(...))
    assert (attn.n_head, attn.n_embd) == (2, 8)


def test_ties_arrive_as_the_client_holds_them():
    model = made(TinyGPT, GPTConfig())
    built = through_wire(model)
    assert built.wte.weight is built.lm_head.weight
    assert_same_tensors(built, model)
    idx = torch.randint(0, 11, (2, 5))
    np.testing.assert_array_equal(built(idx).detach().numpy(), model(idx).detach().numpy())

    untied = made(TinyGPT, GPTConfig())
    untied.lm_head.weight = nn.Parameter(untied.wte.weight.detach().clone() + 1)
    assert through_wire(untied).lm_head.weight is not through_wire(untied).wte.weight
    tied = made(Block, GPTConfig())
    tied.ln_2.weight = tied.ln_1.weight
    built = through_wire(tied)
    assert built.ln_2.weight is built.ln_1.weight
    assert_same_tensors(built, tied)


def test_zero_dimensional_tensors_arrive_as_such():
    """A scalar buffer (batch norm's num_batches_tracked) and a scalar parameter keep their
    shape (); they arrived as shape [1]."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    model.register_parameter("temperature", nn.Parameter(torch.tensor(0.5)))
    built = through_wire(model)
    assert built[1].num_batches_tracked.shape == () and built.temperature.shape == ()
    assert_same_tensors(built, model)


def test_dtypes_changed_after_construction_arrive():
    block = made(Block, GPTConfig())
    block.double()
    built = through_wire(block)
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


def test_a_bound_method_and_a_closure_over_a_local_function_arrive_bound_to_the_copy():
    gated = made(lambda n: Gated(n, scale=3.0), 4)
    built = through_wire(gated)
    assert built.act.__self__ is built
    x = torch.randn(3, 4)
    np.testing.assert_array_equal(built(x).detach().numpy(), gated(x).detach().numpy())
    with torch.no_grad():
        built.lin.bias.add_(1.0)
    assert not np.allclose(built.scaled(x).detach().numpy(), gated.scaled(x).detach().numpy())


class Noisy(nn.Module):
    """Its constructor draws from the default generator beyond its parameters."""

    made = 0

    def __init__(self, n):
        super().__init__()
        Noisy.made += 1
        self.lin = nn.Linear(n, n)
        self.noise = torch.randn(n)  # a tensor attribute: arrives with its value
        self.f = lambda x: self.lin(x) + self.noise


def test_no_constructor_runs_and_the_generator_is_left_as_it_was():
    noisy = Noisy(3)
    made_before = Noisy.made
    torch.manual_seed(7)
    torch.randn(2)
    state = torch.get_rng_state().numpy().copy()
    built = through_wire(noisy)
    np.testing.assert_array_equal(torch.get_rng_state().numpy(), state)
    assert Noisy.made == made_before
    np.testing.assert_array_equal(built.noise.numpy(), noisy.noise.numpy())


def test_tensor_values_go_as_frames_beside_a_small_pickle():
    model = nn.Sequential(nn.Linear(64, 64), nn.Embedding(10, 64).double())
    model.register_buffer("steps", torch.tensor([3], dtype=torch.int64))
    blob, arrays = shipping.dumps(model)
    assert sorted(a.shape for a in arrays) == sorted(
        t.numpy().shape for t in model.state_dict().values())
    if not library._OPS:  # (each custom operator of this process rides along)
        assert blob.nbytes < sum(a.nbytes for a in arrays) / 4  # no value inside the pickle
    # nor does the pickle grow with them (whatever else it carries: the custom operators
    # this process made, which another test module may have made at import)
    wide = nn.Sequential(nn.Linear(256, 256), nn.Embedding(10, 64).double())
    wide.register_buffer("steps", torch.tensor([3], dtype=torch.int64))
    assert abs(shipping.dumps(wide)[0].nbytes - blob.nbytes) < 64
    assert {a.dtype for a in arrays} == {np.dtype("float32"), np.dtype("float64"),
                                         np.dtype("int64")}


def test_hooks_stay_with_the_client():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    model[0].register_forward_hook(lambda m, a, out: None)
    model[1].register_full_backward_hook(lambda m, gi, go: None)
    model.register_state_dict_pre_hook(lambda *a: None)
    built = through_wire(model)
    assert not built[0]._forward_hooks and not built[1]._backward_hooks
    assert built[1]._is_full_backward_hook is None and not built._state_dict_pre_hooks
    assert len(model[0]._forward_hooks) == 1 and len(model[1]._backward_hooks) == 1


def test_a_stage_that_reaches_a_module_held_elsewhere_is_refused_by_path():
    shared = nn.Linear(2, 2)
    stage = nn.Sequential(nn.Linear(2, 2))
    stage[0].peer = [shared]
    with pytest.raises(CodeError, match=r"the module 'head.proj' \(Linear\) is placed on "
                                        "another worker"):
        shipping.dumps(stage, elsewhere={id(shared): "head.proj"})
    stage[0].peer = shared.weight
    with pytest.raises(CodeError, match=r"the parameter or buffer 'head.proj.weight'"):
        shipping.dumps(stage, elsewhere={id(shared.weight): "head.proj.weight"})


def test_the_users_own_modules_go_by_value_and_libraries_by_reference(monkeypatch):
    stub = types.ModuleType("only_on_this_client")
    monkeypatch.setitem(sys.modules, "only_on_this_client", stub)
    own = shipping.own_code_modules()
    assert __name__ in own and "only_on_this_client" in own  # a test file; a stub
    assert not {"numpy", "json", "pytest", "disthook", "disthook.nn", "workers"} & set(own)


def test_a_pickle_that_refers_to_a_frame_it_did_not_bring_is_refused():
    blob, arrays = shipping.dumps(nn.Linear(2, 2))
    with pytest.raises(CodeError, match="refers to array 1, but 1 came with it"):
        shipping.loads(blob, arrays[:1])


# ---- modules as data: no code -----------------------------------------------------------------

def test_nn_module_leaves_constructors_alone():
    assert Block.__init__ is Block.__dict__["__init__"]
    assert "_constructor_args" not in made(Block, GPTConfig()).__dict__


def test_a_module_that_holds_code_cannot_travel_as_data_and_says_which_attribute():
    with pytest.raises(SpecError, match=r"attribute 'head' of the root module \(TinyGPT\) is "
                                        "not data: a lambda"):
        module_spec(made(TinyGPT, GPTConfig()))
    with pytest.raises(SpecError, match=r"attribute 'mlpf' of the root module \(Block\) is "
                                        "not data: a lambda"):
        module_spec(made(Block, GPTConfig()))
    with pytest.raises(SpecError, match=r"attribute 'act' of the root module \(Gated\) is "
                                        "not data"):
        module_spec(Gated(2))


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = GPTConfig()
        self.lin = nn.Linear(2, 2)


def test_data_round_trips_and_object_classes_follow_the_allow_list(monkeypatch):
    model = Configured()
    spec = module_spec(model)
    built = build_module(spec)
    assert built.config == model.config and type(built.config) is GPTConfig
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "/client/script.py", raising=False)
    assert main_script_of(spec) is None
    spec["attrs"]["config"]["object"]["class"] = "json:JSONDecoder"
    with pytest.raises(SpecError, match="importing 'json' is not allowed here"):
        build_module(spec, allow=lambda m: m != "json")
    spec["attrs"]["config"]["object"]["class"] = "__main__:GPTConfig"
    assert main_script_of(spec) == "/client/script.py"
    spec["attrs"]["config"]["object"]["class"] = "disthook.nn:Linear"
    with pytest.raises(SpecError, match="is not a class whose objects are plain data"):
        build_module(spec)
    assert os.path.isabs(main_script_of(module_spec(model)) or "/")


def test_what_cannot_be_pickled_is_named_by_module_and_attribute():
    import threading

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    model[1][0].guard = threading.Lock()
    with pytest.raises(CodeError, match=r"attribute 'guard' of '1.0' \(ReLU\) holds a lock, "
                                        r"which cannot be pickled"):
        shipping.dumps(model)


def test_serve_refuses_a_checkpoint_whose_model_holds_code(tmp_path, capsys):
    from disthook import cli
    from disthook.distributed import checkpoint

    model = nn.Sequential(Gated(2))
    manifest = {"step": None, "class": "torch.nn:Sequential", "fingerprint": "-",
                "stages": [["0"]], "chunks": 1, "schedule": "gpipe", "placement": None,
                **checkpoint._description(model, code=True)}
    assert manifest["structure"] is None and manifest["code"]
    checkpoint.write(str(tmp_path), manifest, [{}])
    assert cli.main(["serve", str(tmp_path), "--name", "m"]) == 1
    assert "whose modules hold code (such as lambdas or bound methods), and a shared " \
           "service runs no code" in capsys.readouterr().err
