"""Random small programs that use hooks, run the same way under torch, disthook in one
process and disthook with the model deployed: the differential fuzzer of
test_f1_hook_fuzz.py and integration/test_f1_hook_fuzz_deployed.py.

A program is data (``generate(seed)``): a model of a few blocks (Sequential, nested custom
modules, a module used twice, ModuleDict/ModuleList, shared parameters, forwards that take
keyword arguments or return tuples, dicts and tuples holding None), hooks of every kind
with what each does (log, return a replacement, raise, remove itself or another hook,
register a tensor hook or retain_grad on what it sees), and rounds of forward and
backward (no_grad and inference regions, in-place changes of the output, retain_graph
twice, ``backward(inputs=)``, ``autograd.grad(inputs=)``; from the eighth round on, hooks
that take ``autograd.grad`` in the forward or register hooks there, hooks on views of
outputs, a block run without grad: F12_EXTRAS). ``run(T, program)`` carries it
out against the library ``T`` and returns its log: every hook call in order (which hook,
on which module or tensor, its arguments' values, what it returned), the outputs, every
``.grad`` and the errors (their type). ``compare`` names the first difference of two logs.
"""
from __future__ import annotations

import random
import warnings

import numpy as np

WIDTH = 3
BLOCKS = ("linear", "seq", "kw", "tuple", "none_tuple", "dict", "twice", "moduledict",
          "modulelist", "shared", "nested", "act", "identity")
# blocks whose output is one tensor (a chain of them can be an nn.Sequential)
PLAIN_BLOCKS = ("linear", "seq", "twice", "shared", "nested", "act", "moduledict",
                "modulelist")


class HookError(Exception):
    """What a hook that raises raises (the same class under every library)."""


# ---- the program, as data ---------------------------------------------------------------

def generate(seed: int, *, deployable: bool = False, extras: bool | None = None) -> dict:
    """The program of ``seed``. ``deployable``: only what a deployed model is meant to take
    the same way (no global module hooks, no saved-tensor hooks, no Node hooks inside the
    model's graph). ``extras``: rounds may add the shapes of ``EXTRAS`` (by default in one
    process only)."""
    rng = random.Random(seed)
    chain = rng.random() < 0.3
    kinds = PLAIN_BLOCKS if chain else BLOCKS
    blocks = [rng.choice(kinds) for _ in range(rng.randint(1, 3))]
    prog = {"seed": seed, "chain": chain, "blocks": blocks,
            "x_grad": rng.random() < 0.8, "hooks": [], "rounds": [],
            "saved_hooks": (not deployable) and rng.random() < 0.15}
    modules = _module_paths(blocks, chain)
    params = _param_paths(blocks, chain)
    for _ in range(rng.randint(1, 7)):
        prog["hooks"].append(_hook(rng, modules, params, deployable))
    for _ in range(rng.randint(1, 3)):
        prog["rounds"].append(_round(rng, params, len(prog["hooks"]), deployable))
    # shapes added later (F3), drawn from a stream of their own so that the draws above,
    # and so every deployable program, stay what they were
    extra = random.Random(f"extras-{seed}")
    wider = not deployable if extras is None else extras
    for rnd in prog["rounds"]:
        rnd["extras"] = [e for e in EXTRAS if extra.random() < 0.12] if wider else []
    # shapes added later again (F4), from a third stream, with the extras: a Linear block
    # that adds a buffer it updates in training (hooks then on a buffer's user), hooks whose
    # action runs inside no_grad, enable_grad or inference_mode (and log the grad mode they
    # see), and forwards under torch.utils.checkpoint (hooks fire again in its recompute)
    wide = random.Random(f"f4-{seed}")
    prog["buffered"] = [wider and kind == "linear" and wide.random() < 0.5 for kind in blocks]
    for h in prog["hooks"]:
        h["mode"] = wide.choice((None, None, None, "no_grad", "enable_grad",
                                 "inference")) if wider else None
    for rnd in prog["rounds"]:
        rnd["checkpoint"] = wider and rnd["mode"] == "grad" and wide.random() < 0.15
    # shapes added in the fifth round (F5), from a fourth stream, with the extras: hooks
    # that return views, strided tensors or another dtype (``form``), rounds with the steps
    # of F5_EXTRAS, and a global forward hook (deployed too: it fires for the workers'
    # modules as a client hook)
    fifth = random.Random(f"f5-{seed}")
    for h in prog["hooks"]:
        h["form"] = fifth.choice((None,) * 5 + ("view", "strided", "dtype")) if wider else None
        if h["form"] == "dtype" and prog["saved_hooks"]:
            # (not with saved-tensor hooks: where a float64 activation meets a float32 Linear,
            # torch's autograd packs the op's saved tensors before its kernel raises, so the
            # pack hook runs a few more times before the same error; disthook checks first)
            h["form"] = None
    for rnd in prog["rounds"]:
        rnd["f5"] = [e for e in F5_EXTRAS if fifth.random() < 0.12] if wider else []
    if wider and fifth.random() < 0.15:
        prog["hooks"].append({"kind": "g_fwd", "prepend": False, "with_kwargs": False,
                              "always_call": fifth.random() < 0.5, "act": False,
                              "target": "", "does": "log", "other": 0, "when": 0.0,
                              "nth": 0, "mode": None, "form": None})
    # shapes of the sixth round (F6), from a fifth stream, with the extras: checkpointed
    # forwards with use_reentrant=True too, and the steps of F6_EXTRAS (every draw made
    # whatever the round is, so that each round's draws stay where they are)
    sixth = random.Random(f"f6-{seed}")
    for rnd in prog["rounds"]:
        reentrant, steps, to_none = (sixth.random() < 0.5, [sixth.random() < 0.1 for _ in
                                                             F6_EXTRAS], sixth.random() < 0.5)
        rnd["reentrant"] = wider and rnd["checkpoint"] and reentrant
        rnd["f6"] = [e for e, drawn in zip(F6_EXTRAS, steps) if drawn and not (
            # (not where a known difference shows, left as it is: a float32 weight used
            # twice in one autocast region, whose two bfloat16 gradients torch sums in
            # bfloat16 through its cache of the region's casts, which disthook has not
            # (docs/torch_surface.md: each use casts again, and its gradient reaches the
            # weight in float32); node hooks on a vmap result, whose grad_fn is the
            # node stacking the rows, where torch's is the function's last op)
            e == "autocast" and (rnd["calls"] > 1 or {"twice", "shared"} & set(blocks))
            or e == "vmap_out" and rnd["node_hooks"])] if wider else []
        rnd["set_to_none"] = to_none
    # shapes of the seventh round (F9), from a sixth stream, with the extras: the steps of
    # F9_EXTRAS
    seventh = random.Random(f"f9-{seed}")
    for rnd in prog["rounds"]:
        rnd["f9"] = [e for e in F9_EXTRAS if seventh.random() < 0.12] if wider else []
    # shapes of the eighth round (F12), from a seventh stream, with the extras: the steps of
    # F12_EXTRAS, and which view of an output they take
    eighth = random.Random(f"f12-{seed}")
    for rnd in prog["rounds"]:
        drawn, view = [eighth.random() < 0.12 for _ in F12_EXTRAS], eighth.choice(VIEWS)
        rnd["f12"] = [e for e, d in zip(F12_EXTRAS, drawn) if d] if wider else []
        rnd["view"] = view
    return prog


# what a round may add (one process only, for now): a custom Function on the output (with
# setup_context, once_differentiable, mark_non_differentiable, set_materialize_grads), a
# multi-grad hook on the output and the input in either mode, autograd.grad's
# materialize_grads, save_on_cpu around the forward, and a hook on the output that
# registers another hook on it and removes itself
EXTRAS = ("custom", "custom_once", "multi_all", "multi_any", "materialize", "save_on_cpu",
          "hook_in_hook")

# what a round may add in the fifth round: a call that raises in the model's forward (a
# wrong width: always_call forward hooks still fire), a forward pre-hook on the root that
# registers a forward hook on the last block during the forward (it fires in that call) and
# removes itself, autograd.grad with grad_outputs for two outputs, and a first backward with
# retain_graph=True after which a hook is added on the output and the first hook removed
# before the round's own backward. (Not autograd.grad's is_grads_batched: torch's hooks
# then get tensors of its vmap, whose values a log cannot read.)
F5_EXTRAS = ("bad_call", "hook_adds_hook", "grad_outputs", "retain_then_rehook")

# what a round may add in the sixth round: the forward under autocast("cpu", bfloat16); the
# output through torch.func.vmap, a hook on what it gives; the model's input made from the
# program's input (``x * 1``) with a hook on a view of it, then the base changed in place
# before the forward; a post-accumulate hook on a chosen parameter through a first backward
# (retain_graph) and zero_grad(set_to_none=...) before the round's own backward; and a
# first backward (retain_graph) that a hook on the output stops, then the round's own
F6_EXTRAS = ("autocast", "vmap_out", "view_hook", "post_acc_again", "raise_then_again")

# what a round may add in the seventh round: a full backward pre-hook on the whole model
# that halves its gradient, with a tensor hook on the output (the same value); a hook on the
# output that, mid-backward, registers a tensor hook on the input and removes the first of
# the program's hooks; and a first backward (retain_graph) after which every hook of the
# program is removed before the round's own backward
F9_EXTRAS = ("pre_and_tensor", "hook_mid_backward", "retain_then_unhook")

# what a round may add in the eighth round: a forward hook on the first block that takes
# autograd.grad of its output to its argument (retain_graph) in the forward; one that
# registers, during the forward, a full backward hook on the last module and a tensor hook
# on its output; a full backward pre-hook on the first block returning halved gradients
# beside a tensor hook on that block's output; a forward hook on the first block returning
# its output rebuilt from views of it (a round's VIEWS choice), a tensor hook on the first
# view and retain_grad on the second; views of the model's output, hooked and retained the
# same way, in the loss; and the first block called under set_grad_enabled(False) (the
# model's own forward: not a chain)
F12_EXTRAS = ("grad_in_fwd", "reg_in_fwd", "bpre_beside_tensor", "views_in_fwd",
              "views_of_out", "grad_off")
VIEWS = ("chunk", "split", "unbind", "narrow")


def _hook(rng, modules, params, deployable) -> dict:
    kinds = ["fpre", "fwd", "bpre", "bwd", "param", "input"] * 2
    kinds += ["legacy"] * (rng.random() < 0.2)
    if not deployable:
        kinds += ["g_fpre", "g_fwd", "g_bpre", "g_bwd", "node", "post_acc"]
    kind = rng.choice(kinds)
    hook = {"kind": kind, "prepend": rng.random() < 0.25, "with_kwargs": rng.random() < 0.3,
            "always_call": rng.random() < 0.2, "act": rng.random() < 0.5}
    if kind in ("param", "post_acc", "node"):
        hook["target"] = rng.choice(params)
    elif kind in ("fpre", "fwd", "bpre", "bwd", "legacy"):
        hook["target"] = rng.choice(modules)
    else:
        hook["target"] = ""
    does = ["log"] * 5 + ["replace"] * 3 + ["raise", "remove_self", "remove_other",
                                            "inplace", "bad"]
    if kind in ("fwd", "g_fwd"):
        does += ["act_hook", "act_retain"] * 2
    hook["does"] = rng.choice(does)
    hook["other"] = rng.randrange(8)
    hook["when"] = rng.random()  # raise/remove only on some calls: call number % 3
    hook["nth"] = rng.randrange(3)
    return hook


def _round(rng, params, n_hooks, deployable) -> dict:
    mode = rng.choice(["grad"] * 6 + ["no_grad", "inference"])
    backward = rng.choice(["backward", "backward", "twice", "inputs", "grad", "grad_x",
                           "none"])
    return {"mode": mode, "backward": backward, "calls": rng.choice([1, 1, 1, 2]),
            # (an inference tensor changed in place outside the mode: torch and disthook
            # refuse it, tested in test_f2_inference_tensors.py, not generated here)
            "inplace": mode != "inference" and rng.random() < 0.15,
            "retain_out": rng.random() < 0.25,
            # (deployed, the node of a placed call's output refuses hooks: docs/hooks.md)
            "node_hooks": not deployable and rng.random() < 0.3,
            "out_hook": rng.random() < 0.3,
            "subset": sorted(rng.sample(range(len(params)), rng.randint(1, len(params)))),
            "remove": sorted(rng.sample(range(n_hooks), rng.randint(0, n_hooks) // 2)),
            "zero_grad": rng.random() < 0.3}


# ---- the model ----------------------------------------------------------------------------

def _module_paths(blocks, chain) -> list:
    """Every module path of the model (the root is ``""``), in named_modules order."""
    paths = [""]
    for i, kind in enumerate(blocks):
        base = str(i) if chain else f"blocks.{i}"
        if not chain and i == 0:
            paths.append("blocks")
        paths.append(base)
        paths += [f"{base}.{sub}" for sub in _SUBMODULES[kind]]
    return paths


_SUBMODULES = {
    "linear": [], "act": [], "identity": [], "seq": ["0", "1", "2"], "kw": ["lin"],
    "tuple": ["lin"], "none_tuple": ["lin"], "dict": ["lin"], "twice": ["lin"],
    "moduledict": ["layers", "layers.a", "layers.b"], "modulelist": ["layers", "layers.0",
                                                                    "layers.1"],
    "shared": ["a", "b"], "nested": ["inner", "inner.lin"],
}
_PARAMS = {
    "linear": ["weight", "bias"], "act": [], "identity": [], "seq": ["0.weight", "0.bias",
                                                                     "2.weight", "2.bias"],
    "kw": ["lin.weight", "lin.bias"], "tuple": ["lin.weight", "lin.bias"],
    "none_tuple": ["lin.weight", "lin.bias"], "dict": ["lin.weight", "lin.bias"],
    "twice": ["lin.weight", "lin.bias"], "moduledict": ["layers.a.weight", "layers.a.bias"],
    "modulelist": ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"],
    "shared": ["a.weight", "a.bias", "b.bias"], "nested": ["inner.lin.weight",
                                                           "inner.lin.bias"],
}


def _param_paths(blocks, chain) -> list:
    paths = []
    for i, kind in enumerate(blocks):
        base = str(i) if chain else f"blocks.{i}"
        paths += [f"{base}.{p}" for p in _PARAMS[kind]]
    return paths or ["x"]  # a model of activations only: the input stands in


def build(T, prog):
    """The program's model under ``T``, its parameters set from the program's seed."""
    nn = T.nn

    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(WIDTH, WIDTH)

        def forward(self, x, *, scale=1.0):
            return self.lin(x) * scale

    class Tuple(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            h = self.lin(x)
            return h, h.sigmoid()

    class NoneTuple(Tuple):
        def forward(self, x):
            return self.lin(x).tanh(), None

    class Dict(Tuple):
        def forward(self, x):
            return {"y": self.lin(x) * 0.5}

    class Twice(Tuple):
        def forward(self, x):
            return self.lin(self.lin(x).relu())

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x).tanh())

    class Inner(Tuple):
        def forward(self, x):
            return self.lin(x).tanh() + x

    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) * 2

    class WithDict(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleDict({"a": nn.Linear(WIDTH, WIDTH), "b": nn.Sigmoid()})

        def forward(self, x):
            return self.layers["b"](self.layers["a"](x))

    class WithList(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).tanh()
            return x

    class Root(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.blocks = nn.ModuleList(blocks)

        grad_off = False  # (F12's grad_off: the first block called without grad)

        def forward(self, x):
            for i, (kind, block) in enumerate(zip(prog["blocks"], self.blocks)):
                if i == 0 and self.grad_off:
                    with T.set_grad_enabled(False):
                        x = _block(kind, block, x)
                else:
                    x = _block(kind, block, x)
            return x

    def _block(kind, block, x):
        if kind == "kw":
            return block(x, scale=0.5)
        if kind == "tuple":
            a, b = block(x)
            return a + b
        if kind == "none_tuple":
            return block(x)[0]
        if kind == "dict":
            return block(x)["y"]
        return block(x)

    class Buffered(nn.Linear):
        """A Linear that adds its buffer ``shift`` and, in training, moves it (no_grad)."""

        def __init__(self):
            super().__init__(WIDTH, WIDTH)
            self.register_buffer("shift", T.full((WIDTH,), 0.25))

        def forward(self, x):
            out = super().forward(x) + self.shift
            if self.training:
                with T.no_grad():
                    self.shift.mul_(0.5).add_(out.mean(0) * 0.1)
            return out

    makers = {"linear": lambda: nn.Linear(WIDTH, WIDTH),
              "seq": lambda: nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(),
                                           nn.Linear(WIDTH, WIDTH)),
              "kw": Kw, "tuple": Tuple, "none_tuple": NoneTuple, "dict": Dict,
              "twice": Twice, "moduledict": WithDict, "modulelist": WithList,
              "shared": Shared, "nested": Nested, "act": nn.Tanh, "identity": nn.Identity}
    blocks = [Buffered() if buffered else makers[kind]() for kind, buffered in
              zip(prog["blocks"], prog.get("buffered") or [False] * len(prog["blocks"]))]
    model = nn.Sequential(*blocks) if prog["chain"] else Root(blocks)
    rng = np.random.default_rng(prog["seed"])
    with T.no_grad():
        for _, p in model.named_parameters():
            p.copy_(T.tensor(np.round(rng.uniform(-1, 1, p.shape), 2).astype(np.float32)))
    return model


# ---- running it -----------------------------------------------------------------------------

def summary(v):
    """A hook argument or result as plain data: tensors as float64 arrays."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "detach") and hasattr(v, "shape"):
        if str(v.dtype).endswith("bfloat16"):  # (torch's numpy() takes no bfloat16)
            v = v.float()
        return np.array(v.detach().numpy(), dtype=np.float64)
    if isinstance(v, (tuple, list)):
        return type(v)(summary(a) for a in v)
    if isinstance(v, dict):
        return {k: summary(a) for k, a in v.items()}
    return type(v).__name__


def run(T, prog, deploy=None, warned: list | None = None) -> list:
    """Carry ``prog`` out under ``T``; ``deploy(model)`` places the model (deployed runs)
    and returns it. The log, as plain data; the warnings' texts added to ``warned``."""
    log = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        globals_ = []
        try:
            _run(T, prog, deploy, log, globals_)
        finally:
            for handle in globals_:
                handle.remove()
    if warned is not None:
        warned.extend(str(w.message) for w in caught)
    return log


def _run(T, prog, deploy, log, globals_):
    model = build(T, prog)
    names = {}
    for path, m in model.named_modules():
        names.setdefault(id(m), path)
    params = dict(model.named_parameters())
    if deploy is not None:
        model = deploy(model)
    x = T.tensor(np.round(np.random.default_rng(prog["seed"] + 1).uniform(
        -1, 1, (2, WIDTH)), 2).astype(np.float32), requires_grad=prog["x_grad"])
    params.setdefault("x", x)
    handles = {}
    calls = {}
    kept = {}  # retained activations, by hook index

    def make(i, h):
        """The hook function of hook ``i`` for its kind."""
        kind, does = h["kind"], h["does"]
        tag = f"h{i}:{kind}"

        def act_on(value, what):
            """What the hook does on a call, after logging: raise, remove, or the value it
            returns (None: keep); inside the hook's grad mode, if it has one."""
            mode = h.get("mode")
            if mode is None:
                return act(value, what)
            region = {"no_grad": T.no_grad, "enable_grad": T.enable_grad,
                      "inference": T.inference_mode}[mode]
            log.append((tag + ":mode", T.is_grad_enabled()))
            with region():
                log.append((tag + ":in " + mode, T.is_grad_enabled(),
                            T.is_inference_mode_enabled()))
                return act(value, what)

        def act(value, what):
            n = calls[i] = calls.get(i, 0) + 1
            if does == "raise" and n % 3 == h["nth"] % 3 + 1 or does == "raise" and n == 1:
                raise HookError(tag)
            if does == "remove_self":
                handles[i].remove()
            elif does == "remove_other" and h["other"] in handles:
                handles[h["other"]].remove()
            elif does == "replace":
                return _formed(T, _replace(T, value, what), h.get("form"))
            elif does == "inplace":
                _inplace(value)
            elif does == "bad":
                return _bad(T, value, what)
            return None

        def done(result):
            log.append(("ret", tag, summary(result)))
            return result

        if kind in ("fpre", "g_fpre"):
            if h["with_kwargs"] and kind == "fpre":
                def fn(m, args, kwargs):
                    log.append((tag, names.get(id(m)), summary(args), summary(kwargs)))
                    r = act_on((args, kwargs), "args_kwargs")
                    return done(r)
            else:
                def fn(m, args):
                    log.append((tag, names.get(id(m)), summary(args)))
                    return done(act_on(args, "args"))
        elif kind in ("fwd", "g_fwd"):
            def on_output(m, args, out):
                r = act_on(out, "output")
                if does in ("act_hook", "act_retain"):
                    t = _first_tensor(out)
                    if does == "act_hook":
                        t.register_hook(lambda g: log.append((tag + ":act", summary(g))))
                    else:
                        t.retain_grad()
                        kept[i] = t
                return done(r)

            if h["with_kwargs"]:
                def fn(m, args, kwargs, out):
                    log.append((tag, names.get(id(m)), summary(args), summary(kwargs),
                                summary(out)))
                    return on_output(m, args, out)
            else:
                def fn(m, args, out):
                    log.append((tag, names.get(id(m)), summary(args), summary(out)))
                    return on_output(m, args, out)
        elif kind in ("bpre", "g_bpre"):
            def fn(m, grad_output):
                log.append((tag, names.get(id(m)), summary(grad_output)))
                return done(act_on(grad_output, "grads"))
        elif kind in ("bwd", "g_bwd", "legacy"):
            def fn(m, grad_input, grad_output):
                log.append((tag, names.get(id(m)), summary(grad_input), summary(grad_output)))
                return done(act_on(grad_input, "grads"))
        elif kind == "node":  # a pre-hook of the parameter's AccumulateGrad node
            def fn(grad_outputs):
                log.append((tag, h["target"], summary(grad_outputs)))
                return done(act_on(grad_outputs, "grads"))
        elif kind == "post_acc":
            def fn(p):
                log.append((tag, h["target"], summary(p.grad)))
                return done(act_on(None, "none"))
        else:  # a tensor hook: on a parameter or the input
            def fn(g):
                log.append((tag, h["target"], summary(g)))
                return done(act_on(g, "grad"))
        return fn

    def register(i, h):
        kind, fn = h["kind"], make(i, h)
        if kind.startswith("g_"):
            mm = T.nn.modules.module
            reg = {"g_fpre": mm.register_module_forward_pre_hook,
                   "g_bpre": mm.register_module_full_backward_pre_hook,
                   "g_bwd": mm.register_module_full_backward_hook}
            if kind == "g_fwd":
                handle = mm.register_module_forward_hook(fn, with_kwargs=h["with_kwargs"],
                                                         always_call=h["always_call"])
            else:
                handle = reg[kind](fn)
            globals_.append(handle)
            return handle
        if kind in ("param", "post_acc", "input", "node"):
            t = x if kind == "input" else params[h["target"]]
            if kind == "node":
                return (t * 1).grad_fn.next_functions[0][0].register_prehook(fn)
            if kind == "post_acc":
                return t.register_post_accumulate_grad_hook(fn)
            return t.register_hook(fn)
        m = model.get_submodule(h["target"])
        if kind == "fpre":
            return m.register_forward_pre_hook(fn, prepend=h["prepend"],
                                               with_kwargs=h["with_kwargs"])
        if kind == "fwd":
            return m.register_forward_hook(fn, prepend=h["prepend"],
                                           with_kwargs=h["with_kwargs"],
                                           always_call=h["always_call"])
        if kind == "bpre":
            return m.register_full_backward_pre_hook(fn, prepend=h["prepend"])
        if kind == "bwd":
            return m.register_full_backward_hook(fn, prepend=h["prepend"])
        return m.register_backward_hook(fn)

    for i, h in enumerate(prog["hooks"]):
        try:
            handles[i] = step(log, f"register h{i}", lambda i=i, h=h: register(i, h))
        except Stop:
            pass

    for r, rnd in enumerate(prog["rounds"]):
        log.append(("round", r))
        _one_round(T, prog, rnd, model, x, params, handles, kept, log)
        for i in rnd["remove"]:
            if i in handles:
                handles[i].remove()


def step(log, what, fn):
    """Run ``fn``; an exception is logged (its type) and re-raised as Stop."""
    try:
        return fn()
    except Exception as e:  # (its type is what is compared)
        name = type(e).__name__
        if name == "RemoteError":  # a RuntimeError subclass: the worker's type is its kind
            name = "RuntimeError" if e.kind == "RuntimeError" else f"RemoteError:{e.kind}"
        log.append(("error", what, name))
        raise Stop from e


class Stop(Exception):
    """A step raised: the round ends there."""


def _one_round(T, prog, rnd, model, x, params, handles, kept, log):
    kept.clear()
    whole = None  # (F9's pre_and_tensor: a hook on the whole model for this round)
    if "pre_and_tensor" in rnd.get("f9", ()):
        whole = model.register_full_backward_pre_hook(
            lambda m, g: (log.append(("whole pre", summary(g))), _halved(g))[1])
    eighth = _eighth_hooks(T, prog, rnd, model, log, kept)
    try:
        _round_steps(T, prog, rnd, model, x, params, kept, log, handles)
    except Stop:
        pass
    finally:
        if whole is not None:
            whole.remove()
        for h in eighth:
            h.remove()
        if not prog["chain"]:
            type(model).grad_off = False
    for name, p in params.items():
        log.append(("grad", name, summary(p.grad)))
    for name, b in model.named_buffers():
        log.append(("buffer", name, summary(b)))


def _views(t, how):
    """Views of ``t`` (a round's VIEWS choice), two or more, that rebuild it whole."""
    if how == "chunk":
        return list(t.chunk(2, dim=-1))
    if how == "split":
        return list(t.split([1, t.shape[-1] - 1], dim=-1))
    if how == "unbind":
        return list(t.unbind(0))
    return [t.narrow(-1, 0, 2), t.narrow(-1, 2, t.shape[-1] - 2)]


def _rebuilt(T, views, how):
    return T.stack(views, 0) if how == "unbind" else T.cat(views, -1)


def _watch_views(views, tag, kept, key, log):
    """A tensor hook on the first of ``views``, retain_grad on the second (kept under
    ``key``: its .grad is logged after the backward)."""
    if views[0].requires_grad:
        views[0].register_hook(lambda g: log.append((tag, summary(g))))
    if views[1].requires_grad:
        views[1].retain_grad()
        kept[key] = views[1]


def _eighth_hooks(T, prog, rnd, model, log, kept) -> list:
    """F12_EXTRAS's hooks for one round (removed when it ends): each on the first block,
    and the last module for reg_in_fwd; grad_off set on the model (not a chain)."""
    eighth = rnd.get("f12", ())
    paths = _module_paths(prog["blocks"], prog["chain"])
    first = model.get_submodule("0" if prog["chain"] else "blocks.0")
    last = model.get_submodule(paths[-1])
    handles = []
    if "grad_off" in eighth and not prog["chain"]:
        type(model).grad_off = True
    if "grad_in_fwd" in eighth:
        def grads(m, args, out):
            o, a = _first_tensor(out), _first_tensor(args)
            if o is not None and a is not None and o.requires_grad and a.requires_grad:
                got = T.autograd.grad(o.sum(), a, retain_graph=True, allow_unused=True)
                log.append(("grad in fwd", summary(got)))

        handles.append(first.register_forward_hook(grads))
    if "reg_in_fwd" in eighth:
        def registers(m, args, out):
            log.append(("registering",))
            handles.append(last.register_full_backward_hook(
                lambda m2, gi, go: log.append(("registered bwd", summary(gi), summary(go)))))
            o = _first_tensor(out)
            if o is not None and o.requires_grad:
                o.register_hook(lambda g: log.append(("registered tensor", summary(g))))

        handles.append(first.register_forward_hook(registers))
    if "bpre_beside_tensor" in eighth:
        handles.append(first.register_full_backward_pre_hook(
            lambda m, g: (log.append(("first pre", summary(g))), _halved(g))[1]))

        def beside(m, args, out):
            o = _first_tensor(out)
            if o is not None and o.requires_grad:
                o.register_hook(lambda g: log.append(("first out", summary(g))))

        handles.append(first.register_forward_hook(beside))
    if "views_in_fwd" in eighth:
        def rebuilt(m, args, out):
            if not isinstance(out, T.Tensor) or out.dim() != 2:
                return None
            views = _views(out, rnd["view"])
            _watch_views(views, "view in fwd", kept, 1000, log)
            return _rebuilt(T, views, rnd["view"])

        handles.append(first.register_forward_hook(rebuilt))
    return handles


def _in(region, fn):
    with region():
        return fn()


def _round_steps(T, prog, rnd, model, x, params, kept, log, handles):
    region = {"grad": T.enable_grad, "no_grad": T.no_grad,
              "inference": T.inference_mode}[rnd["mode"]]

    extras = rnd.get("extras", ())
    sixth = rnd.get("f6", ())
    given = x
    if "view_hook" in sixth:  # a hook on a view of the input, then its base changed
        given = x * 1
        if given.requires_grad:
            given[:1].register_hook(lambda g: log.append(("view_hook", summary(g))))
        given.mul_(2)

    def forward():
        if "autocast" in sixth:
            with T.autocast("cpu", dtype=T.bfloat16):
                return in_region()
        return in_region()

    def in_region():
        with region():
            if "save_on_cpu" in extras:
                with T.autograd.graph.save_on_cpu():
                    return call()
            if prog["saved_hooks"]:
                with T.autograd.graph.saved_tensors_hooks(
                        lambda t: (log.append(("pack", tuple(t.shape))), t)[1],
                        lambda t: (log.append(("unpack", tuple(t.shape))), t)[1]):
                    return call()
            return call()

    def call():
        if rnd.get("checkpoint"):
            out = T.utils.checkpoint.checkpoint(model, given,
                                                use_reentrant=rnd.get("reentrant", False))
        else:
            out = model(given)
        for _ in range(rnd["calls"] - 1):  # the model called again: out + model(out)
            out = out + model(out)
        return out

    fifth = rnd.get("f5", ())
    if "bad_call" in fifth:  # a forward that raises (a wrong width), the round going on
        try:
            step(log, "bad call", lambda: _in(region, lambda: model(T.ones(2, WIDTH + 1))))
        except Stop:
            pass
    added, handle = [], None
    if "hook_adds_hook" in fifth:
        last = model.get_submodule(_module_paths(prog["blocks"], prog["chain"])[-1])

        def adder(m, args):
            log.append(("adder",))
            added.append(last.register_forward_hook(
                lambda m2, a, o: log.append(("added", summary(o)))))
            handle.remove()

        handle = model.register_forward_pre_hook(adder)
    try:
        out = step(log, "forward", forward)
    finally:
        for h in [handle, *added]:
            if h is not None:
                h.remove()
    log.append(("out", summary(out)))
    if rnd["inplace"]:
        step(log, "inplace", lambda: out.mul_(2))
    for kind in ("custom", "custom_once"):
        if kind in extras:
            fn = _custom_function(T, log, kind)
            out = step(log, kind, lambda fn=fn, o=out: fn.apply(o)[0])
            log.append((kind, summary(out)))
    if "vmap_out" in sixth:  # through a torch.func transform, a hook on its result
        out = step(log, "vmap", lambda o=out: T.func.vmap(lambda r: r * 2 + 1)(o))
        log.append(("vmap", summary(out)))
        if out.requires_grad:
            out.register_hook(lambda g: log.append(("vmap_hook", summary(g))))
    if rnd["backward"] == "none":
        return
    c = T.tensor(np.arange(1, 1 + 2 * WIDTH, dtype=np.float32).reshape(2, WIDTH) / 4)
    if "views_of_out" in rnd.get("f12", ()):  # views of the output, hooked, in the loss
        views = step(log, "views", lambda: _views(out, rnd["view"]))
        step(log, "watch views", lambda: _watch_views(views, "view of out", kept, 1001,
                                                      log))
        loss = step(log, "loss", lambda: (out * c).sum() + sum(
            (v * (k + 2.0)).sum() for k, v in enumerate(views)))
    else:
        loss = step(log, "loss", lambda: (out * c).sum())
    if rnd["retain_out"]:
        step(log, "retain_grad", out.retain_grad)
    if rnd["out_hook"]:
        step(log, "out hook", lambda: out.register_hook(
            lambda g: log.append(("out_hook", summary(g)))))
    if rnd["node_hooks"]:
        def node_hooks():
            for name, t in (("loss", loss), ("out", out)):
                if t.grad_fn is not None:
                    t.grad_fn.register_prehook(
                        lambda go, name=name: log.append(("node_pre", name, summary(go))))
                    t.grad_fn.register_hook(
                        lambda gi, go, name=name: log.append(("node_post", name,
                                                              summary(gi), summary(go))))
        step(log, "node hooks", node_hooks)
    for mode in ("all", "any"):
        if f"multi_{mode}" in extras:
            step(log, f"multi {mode}", lambda mode=mode: T.autograd.graph.register_multi_grad_hook(
                (out, x), lambda grads, mode=mode: log.append((f"multi_{mode}", summary(grads))),
                mode=mode))
    if "hook_in_hook" in extras:
        def outer(g):
            log.append(("outer", summary(g)))
            out.register_hook(lambda g2: log.append(("inner", summary(g2))))
            handle.remove()
        handle = step(log, "hook in hook", lambda: out.register_hook(outer))
    chosen = [params[name] for k, name in enumerate(params) if k in rnd["subset"]]
    if "grad_outputs" in fifth:
        got = step(log, "grad_outputs", lambda: T.autograd.grad(
            [out, loss], chosen, grad_outputs=[c * 0.5, T.tensor(2.0)], retain_graph=True,
            allow_unused=True))
        log.append(("grad_outputs result", summary(got)))
    if "retain_then_rehook" in fifth:
        step(log, "backward retained", lambda: loss.backward(retain_graph=True))
        log.append("--- rehooked")
        if out.requires_grad:
            out.register_hook(lambda g: log.append(("late hook", summary(g))))
        if 0 in handles:
            handles[0].remove()
    _sixth_steps(T, rnd, model, out, loss, params, chosen, log)
    _seventh_steps(rnd, x, out, loss, handles, log)
    _round_backward(T, rnd, x, out, loss, chosen, kept, log, extras, model)


def _round_backward(T, rnd, x, out, loss, chosen, kept, log, extras, model):
    kind = rnd["backward"]
    if kind == "backward":
        step(log, "backward", loss.backward)
    elif kind == "twice":
        step(log, "backward 1", lambda: loss.backward(retain_graph=True))
        log.append("---")
        step(log, "backward 2", loss.backward)
    elif kind == "inputs":
        step(log, "backward inputs", lambda: loss.backward(inputs=chosen))
    else:
        wrt = [x] if kind == "grad_x" else chosen
        got = step(log, "autograd.grad", lambda: T.autograd.grad(
            loss, wrt, allow_unused=True, materialize_grads="materialize" in extras))
        log.append(("grad result", summary(got)))
    if rnd["retain_out"]:
        log.append(("out.grad", summary(out.grad)))
    for i in sorted(kept):
        log.append(("kept.grad", i, summary(kept[i].grad)))
    if rnd["zero_grad"]:
        step(log, "zero_grad", model.zero_grad)


def _halved(grads):
    return tuple(None if g is None else g * 0.5 for g in grads)


def _seventh_steps(rnd, x, out, loss, handles, log):
    """F9_EXTRAS's steps before a round's own backward (see F9_EXTRAS)."""
    seventh = rnd.get("f9", ())
    if "pre_and_tensor" in seventh and out.requires_grad:
        out.register_hook(lambda g: log.append(("out seen", summary(g))))
    if "hook_mid_backward" in seventh and out.requires_grad:
        def mid(g):
            log.append(("mid", summary(g)))
            if x.requires_grad:
                x.register_hook(lambda gx: log.append(("added mid", summary(gx))))
            first = next((i for i in sorted(handles)), None)
            if first is not None:
                handles.pop(first).remove()

        out.register_hook(mid)
    if "retain_then_unhook" in seventh:
        step(log, "backward kept", lambda: loss.backward(retain_graph=True))
        log.append("--- unhooked")
        for i in sorted(handles):
            handles.pop(i).remove()


def _sixth_steps(T, rnd, model, out, loss, params, chosen, log):
    """F6_EXTRAS's steps before a round's own backward: a first backward (retain_graph)
    with a post-accumulate hook on a chosen parameter, then ``zero_grad``; a first
    backward that a hook on the output stops."""
    sixth = rnd.get("f6", ())
    if "post_acc_again" in sixth:
        p = (chosen or list(params.values()))[0]
        name = next(n for n, q in params.items() if q is p)
        handle = step(log, "post acc", lambda: p.register_post_accumulate_grad_hook(
            lambda q: log.append(("post_acc_again", name, summary(q.grad)))))
        try:
            step(log, "backward kept", lambda: loss.backward(retain_graph=True))
        finally:
            handle.remove()
        for n, q in params.items():
            log.append(("grad before zero", n, summary(q.grad)))
        step(log, "zero_grad", lambda: model.zero_grad(set_to_none=rnd["set_to_none"]))
    if "raise_then_again" in sixth and out.requires_grad:
        def stop(g):
            log.append(("stopping", summary(g)))
            handle.remove()
            raise HookError("stop")

        handle = out.register_hook(stop)
        try:
            step(log, "backward stopped", lambda: loss.backward(retain_graph=True))
        except Stop:
            pass


def _custom_function(T, log, kind):
    """A Function with ``setup_context`` returning (2 * x, a non-differentiable mask): its
    backward logs what it gets (None for the mask's gradient: materialize_grads off) and,
    ``custom_once``, is ``once_differentiable``."""
    def backward(ctx, g, g_mask):
        (x,) = ctx.saved_tensors
        log.append(("custom backward", summary(g), summary(g_mask), summary(x)))
        return None if g is None else g * 2

    if kind == "custom_once":
        backward = T.autograd.function.once_differentiable(backward)

    class Twice(T.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2, (x > 0).to(x.dtype)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(inputs[0])

    Twice.backward = staticmethod(backward)
    return Twice


# ---- what hooks return -------------------------------------------------------------------

def _scaled(v, factor=2.0):
    if hasattr(v, "shape"):
        return v * factor
    if isinstance(v, tuple):
        return tuple(_scaled(a, factor) for a in v)
    if isinstance(v, list):
        return [_scaled(a, factor) for a in v]
    if isinstance(v, dict):
        return {k: _scaled(a, factor) for k, a in v.items()}
    return v


def _replace(T, value, what):
    """A replacement: gradients doubled, activations negated (their size kept, so that a
    hook on every module does not drive tanh into float32's saturation)."""
    if what == "args_kwargs":
        args, kwargs = value
        return _scaled(args, -1.0), dict(kwargs, **({"scale": 2.0} if "scale" in kwargs
                                                   else {}))
    if what == "none":
        return None
    return _scaled(value, 2.0 if what in ("grads", "grad") else -1.0)


def _formed(T, value, form):
    """A replacement in another form of the same values: a view of a tensor (``view``), a
    strided one that is no view of a dense tensor of its shape (``strided``), or float64
    (``dtype``: torch refuses it for a gradient)."""
    if form is None:
        return value
    if hasattr(value, "shape"):
        if form == "view":
            return value.view(value.shape)
        if form == "strided":
            return T.stack([value, value], -1)[..., 0]
        return value.double()
    if isinstance(value, (tuple, list)):
        return type(value)(_formed(T, a, form) for a in value)
    if isinstance(value, dict):
        return {k: _formed(T, a, form) for k, a in value.items()}
    return value


def _inplace(value):
    """Change what the hook was given in place (a gradient, the output) and return None."""
    t = _first_tensor(value)
    if t is not None:
        t.mul_(-1)


def _bad(T, value, what):
    """A return the library must refuse: a wrong count, a wrong shape, a wrong type."""
    if what == "args_kwargs":
        return value[0]  # not a 2-tuple (args, kwargs)
    if what == "grads":
        return tuple(value) + (None,)
    if what == "grad":
        return value.sum() if value is not None else 1
    if what == "none":
        return 1
    return None  # a pre-hook's or forward hook's any value is taken


def _first_tensor(v):
    if hasattr(v, "shape"):
        return v
    if isinstance(v, (tuple, list)):
        for a in v:
            t = _first_tensor(a)
            if t is not None:
                return t
    if isinstance(v, dict):
        for a in v.values():
            t = _first_tensor(a)
            if t is not None:
                return t
    return None


# ---- comparing two logs ----------------------------------------------------------------------

def compare(got, want, rtol=1e-3, atol=1e-4) -> str | None:
    """The first difference of two logs, in words, or None."""
    for n, (a, b) in enumerate(zip(got, want)):
        if not _same(a, b, rtol, atol):
            return f"entry {n}: {_short(a)}\n   against {_short(b)}"
    if len(got) != len(want):
        n = min(len(got), len(want))
        extra = got[n] if len(got) > n else want[n]
        return (f"{len(got)} entries against {len(want)}; first extra: {_short(extra)} "
                f"({'ours' if len(got) > n else 'torch'})")
    return None


def _same(a, b, rtol, atol) -> bool:
    if isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and a.shape == b.shape
                and np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    if isinstance(b, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(u, v, rtol, atol) for u, v in zip(a, b)))
    if isinstance(b, dict):
        return (isinstance(a, dict) and list(a) == list(b)
                and all(_same(a[k], b[k], rtol, atol) for k in b))
    return not isinstance(a, (np.ndarray, list, tuple, dict)) and a == b


def _short(entry) -> str:
    text = repr(entry).replace("\n", " ")
    return text if len(text) < 400 else text[:400] + " ..."


# what a deployed model warns where a hook fires other than in one process (docs/hooks.md:
# a parameter several calls use, under autograd.grad or backward(inputs=) naming it)
WARNED_DIFFERENCES = ("once for each call of the model in this backward",
                      # (the state a backward leaves where a hook raised: docs/hooks.md)
                      "zero the gradients before going on",
                      # (parts recomputed apart under one checkpoint: docs/distributed.md)
                      "called inside one torch.utils.checkpoint")


def compare_deployed(got, want, warned=()) -> tuple[str, str | None]:
    """A deployed run's log against one process's: ``("same", None)``; ``("refused", why)``
    where the deployed run raised NotImplementedError (a refusal that says so) where one
    process went on; ``("order", why)`` where the entries are the same but hooks of a
    backward fired in another order (a worker runs its stage's backward whole before the
    stage before it starts, one process interleaves them); ``("warned", why)`` where the
    deployed run warned (``warned``: its warnings' texts) of a difference docs/hooks.md
    names; else ``("differs", why)``."""
    difference = compare(got, want)
    if difference is None:
        return "same", None
    n = next((i for i, (a, b) in enumerate(zip(got, want)) if not _same(a, b, 1e-3, 1e-4)),
             min(len(got), len(want)))
    # (refused on the worker once the client's hook returned: its "ret" entry, and those
    # of always_call forward hooks here, come first)
    for entry in got[n:]:
        if entry[0] == "error" and "NotImplementedError" in entry[2]:
            return "refused", difference
        if entry[0] in ("round", "error"):
            break
    if compare(_backward_sorted(got), _backward_sorted(want)) is None:
        return "order", difference
    if any(known in text for text in warned for known in WARNED_DIFFERENCES):
        return "warned", difference
    return "differs", difference


# the entries of hooks that fire in a backward, besides those of the program's hooks
# ("h<i>:..."): the order among them may be a worker's (compare_deployed)
_BACKWARD_HOOK_ENTRIES = ("out_hook", "node_pre", "node_post", "multi_all", "multi_any",
                          "post_acc_again", "view_hook", "vmap_hook", "stopping",
                          "registered bwd", "registered tensor", "first pre", "first out",
                          "view in fwd", "view of out")


def _backward_sorted(log) -> list:
    """``log`` with the hook calls of each backward (a call and its "ret" entry as one)
    sorted, between the entries that are not hook calls."""
    out, run, backward = [], [], False

    def flush():
        out.extend(entry for unit in sorted(run, key=_short) for entry in unit)
        run.clear()

    for entry in log:
        head = entry[0] if isinstance(entry, tuple) else entry
        if backward and entry[0] == "ret" and run:
            run[-1] = (*run[-1], entry)
        elif backward and isinstance(head, str) and (head[:1] == "h" and head[1:2].isdigit()
                                                     or head in _BACKWARD_HOOK_ENTRIES):
            run.append((entry,))
        else:
            flush()
            out.append(entry)
            backward = head == "out" or backward and head != "round"
    flush()
    return out
