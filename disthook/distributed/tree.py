"""Placement over the module tree, decided on the client as pure functions: which submodules
(by path) go whole to which stage, which run here because their parts are on several
workers ("split": their own forward runs here, each placed part on its worker), and which
stay here whole ("client": a stateless module between placed ones, or one a placement
leaves out).

A placement maps module paths to stages (``{"transformer.h.0": 0, "lm_head": 1}``); a path
inherits the stage of its nearest listed ancestor, and a path neither listed nor under a
listed one stays on the client. ``auto_placement`` chooses one for ``stages`` workers:
starting from the root's children it opens the largest module into its children until
every part is small enough (at most an even share of the parameters), keeps modules that
share a tensor (tied embedding and output head) on one stage, and cuts the parts, in module
order, into stages of balanced parameter count. No sockets here.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from disthook.distributed.placement import partition
from disthook.nn.modules.container import ModuleDict
from disthook.nn.modules.module import Module

__all__ = ["Layout", "auto_placement", "layout", "stage_module"]


@dataclass
class Layout:
    """Where each part of a module tree is: ``stages[i]`` the paths placed whole on stage i
    (module order), ``split`` the paths whose parts are on several workers or here (the
    root "" among them), ``client`` the paths kept here whole."""
    stages: list[list[str]]
    split: list[str]
    client: list[str] = field(default_factory=list)

    def stage_of(self, path: str) -> int | None:
        """The stage holding ``path`` (a module, parameter or buffer name), or None when it
        is on the client."""
        for i, paths in enumerate(self.stages):
            for p in paths:
                if p == "" or path == p or path.startswith(p + "."):  # "": the whole model
                    return i
        return None


def _modules(root: Module) -> dict[str, Module]:
    """Every path of the tree, a module held at several (one embedding shared by an encoder
    and a decoder) under each, so that each path can be placed (with the others)."""
    return dict(root.named_modules(remove_duplicate=False))


def _own_tensors(module: Module) -> list:
    return [t for t in (*module._parameters.values(), *module._buffers.values())
            if t is not None]


def _size(module: Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def layout(root: Module, placement: dict[str, int], stages: int) -> Layout:
    """The layout a placement gives, checked: every path names a submodule, every stage
    holds something, and no tensor is on two stages or on a stage and here."""
    mods = _modules(root)
    for path, stage in placement.items():
        if not isinstance(path, str) or path not in mods or path == "":
            known = ", ".join(p for p in list(mods)[1:8])
            raise ValueError(f"placement names {path!r}, which is not a submodule of "
                             f"{type(root).__name__} (its submodules: {known}, ...)")
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < stages:
            raise ValueError(f"placement[{path!r}] = {stage!r}: stages are numbered 0 to "
                             f"{stages - 1}")
    assigned = {}
    for path in mods:
        at, probe = None, path
        while True:
            if probe in placement:
                at = placement[probe]
                break
            if not probe:
                break
            probe = _parent(probe)
        assigned[path] = at
    under: dict[str, set] = {p: {assigned[p]} for p in mods}
    for path in sorted(mods, key=lambda p: -p.count(".") if p else 1):
        if path:  # children before parents: each adds what is under it to its parent
            under[_parent(path)] |= under[path]
    placed: list[list[str]] = [[] for _ in range(stages)]
    split, client = [], []
    for path in mods:
        if path and len(under[_parent(path)]) == 1:
            continue  # inside a whole part
        kinds = under[path]
        if path and len(kinds) == 1:
            (stage,) = kinds
            (client if stage is None else placed[stage]).append(path)
        else:
            split.append(path)
    for i, paths in enumerate(placed):
        if not paths:
            raise ValueError(f"placement puts nothing on stage {i} of {stages}")
    result = Layout(placed, split, client)
    check_tree_ties(root, result)
    return result


def check_tree_ties(root: Module, lay: Layout) -> None:
    """A tensor in two places of the tree must be in one place of the layout: ``ValueError``
    naming both names and where the layout puts them."""
    first: dict[int, tuple[str, int | None]] = {}
    for name, t in [*root.named_parameters(remove_duplicate=False),
                    *root.named_buffers(remove_duplicate=False)]:
        where = lay.stage_of(name)
        seen = first.setdefault(id(t), (name, where))
        if seen[1] != where:
            def said(w):
                return "the client" if w is None else f"stage {w}"
            raise ValueError(
                f"{seen[0]} ({said(seen[1])}) and {name} ({said(where)}) are one tensor "
                "(tied weights): a placement must keep the modules that share it together "
                "(map both paths to one stage)")


def auto_placement(root: Module, stages: int) -> dict[str, int]:
    """A placement of ``root``'s tree on ``stages`` workers (see the module's doc)."""
    mods = _modules(root)
    total = _size(root)
    share = total / stages if stages else total
    units = [p for p, m in mods.items() if p and "." not in p and m is not None]

    def stateful(p: str) -> bool:
        m = mods[p]
        return any(True for _ in m.parameters()) or any(True for _ in m.buffers())

    def openable(p: str) -> bool:
        # opening a module whose children hold nothing (a layer with its own weights and
        # an activation child, KAN's KANLinear) would leave no part to place
        return any(c is not None and stateful(f"{p}.{n}") for n, c in mods[p]._modules.items())

    while True:
        weighted = [p for p in units if stateful(p)]
        big = [p for p in weighted if openable(p) and (_size(mods[p]) > share
                                                         or len(weighted) < stages)]
        if not big:
            break
        widest = max(big, key=lambda p: _size(mods[p]))
        at = units.index(widest)
        units[at:at + 1] = [f"{widest}.{n}" for n, c in mods[widest]._modules.items()
                            if c is not None]
    parts = [p for p in units if stateful(p)]  # stateless parts run on the client
    # parts sharing a tensor go together: the later ones follow the first
    owner: dict[int, str] = {}
    leader = {p: p for p in parts}
    for p in parts:
        for t in [*mods[p].parameters(), *mods[p].buffers()]:
            if owner.setdefault(id(t), p) != p:
                a, b = _find(leader, owner[id(t)]), _find(leader, p)
                if a != b:
                    leader[b] = a
    leaders = [p for p in parts if _find(leader, p) == p]
    if len(leaders) < stages:
        raise ValueError(
            f"cannot place {type(root).__name__} on {stages} stages: its tree has "
            f"{len(leaders)} part(s) with parameters or buffers that can go to different "
            f"workers ({', '.join(leaders) or 'none'}); deploy fewer stages")
    sizes = []
    for p in leaders:
        seen, n = set(), 0
        for q in parts:
            if _find(leader, q) == p:
                for t in mods[q].parameters():
                    if id(t) not in seen:
                        seen.add(id(t))
                        n += t.numel()
        sizes.append(n)
    cuts = [0, *partition(sizes, stages), len(leaders)]
    stage_of = {p: i for i, (a, b) in enumerate(itertools.pairwise(cuts)) for p in leaders[a:b]}
    return {p: stage_of[_find(leader, p)] for p in parts}


def _find(leader: dict[str, str], p: str) -> str:
    while leader[p] != p:
        p = leader[p]
    return p


def stage_module(root: Module, paths: list[str]) -> ModuleDict:
    """What a worker holds for one stage: the modules at ``paths`` in nested ``ModuleDict``s
    named as in the full model, so that every module, parameter and buffer keeps its full
    name there (``transformer.h.0.attn.c_attn.weight``)."""
    def holder() -> ModuleDict:
        made = ModuleDict()
        made.training = root.training  # a holder's mode is the model's; its parts keep theirs
        return made

    top = holder()
    for path in paths:
        at = top
        *outer, last = path.split(".")
        for name in outer:
            if name not in at._modules:
                at._modules[name] = holder()
            at = at._modules[name]
        at._modules[last] = root.get_submodule(path)
    return top
