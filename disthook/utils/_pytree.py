"""``torch.utils._pytree``: nested containers taken apart into their leaves and put back.

A pytree is a leaf or a node: tuples, lists, dicts (``OrderedDict``, ``defaultdict``),
namedtuples, deques, the ``(values, indices)`` pairs of ``max(dim)`` and friends, and any class
given to ``register_pytree_node``; everything else (tensors, numbers, None) is a leaf.
``tree_flatten`` gives the leaves in order and a ``TreeSpec`` of the shape around them,
``tree_unflatten`` rebuilds it, ``tree_map`` applies a function leaf by leaf. Programs use it
to carry a model's nested outputs through a step that wants a flat list (x-transformers,
vit-pytorch, denoising-diffusion-pytorch) and to register their output classes (diffusers).
"""
from __future__ import annotations

import types
import warnings
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LeafSpec", "TreeSpec", "register_pytree_node", "tree_all", "tree_all_only",
           "tree_any", "tree_any_only", "tree_flatten", "tree_is_leaf", "tree_iter",
           "tree_leaves", "tree_map", "tree_map_", "tree_map_only", "tree_map_only_",
           "tree_structure", "tree_unflatten"]


@dataclass(frozen=True)
class NodeDef:
    """How one container type comes apart: ``flatten(node) -> (children, context)`` and
    ``unflatten(children, context) -> node``."""
    type: type
    flatten_fn: Callable
    unflatten_fn: Callable


SUPPORTED_NODES: dict[type, NodeDef] = {}


def register_pytree_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable, *,
                         serialized_type_name: str | None = None, to_dumpable_context=None,
                         from_dumpable_context=None, flatten_with_keys_fn=None) -> None:
    """Make ``cls`` a node: its instances come apart by ``flatten_fn`` and back together by
    ``unflatten_fn``. (The serialization hooks are taken and not used: disthook does not
    serialize TreeSpecs.)"""
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn)


def _register_pytree_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable,
                          **kwargs) -> None:
    warnings.warn("`torch.utils._pytree._register_pytree_node` is deprecated. Please use "
                  "`torch.utils._pytree.register_pytree_node` instead.", FutureWarning,
                  stacklevel=2)
    register_pytree_node(cls, flatten_fn, unflatten_fn, **kwargs)


def _dict_flatten(d: dict) -> tuple[list, list]:
    return list(d.values()), list(d.keys())


def _dict_unflatten(values, context) -> dict:
    return dict(zip(context, values))


def _ordered_dict_unflatten(values, context) -> OrderedDict:
    return OrderedDict(zip(context, values))


def _defaultdict_flatten(d: defaultdict) -> tuple[list, list]:
    return list(d.values()), [d.default_factory, list(d.keys())]


def _defaultdict_unflatten(values, context) -> defaultdict:
    factory, keys = context
    return defaultdict(factory, zip(keys, values))


register_pytree_node(tuple, lambda t: (list(t), None), lambda values, _: tuple(values))
register_pytree_node(list, lambda xs: (list(xs), None), lambda values, _: list(values))
register_pytree_node(dict, _dict_flatten, _dict_unflatten)
register_pytree_node(OrderedDict, _dict_flatten, _ordered_dict_unflatten)
register_pytree_node(defaultdict, _defaultdict_flatten, _defaultdict_unflatten)
register_pytree_node(deque, lambda d: (list(d), d.maxlen),
                     lambda values, maxlen: deque(values, maxlen=maxlen))


def _node_def(node) -> NodeDef | None:
    kind = type(node)
    if kind in SUPPORTED_NODES:
        return SUPPORTED_NODES[kind]
    if isinstance(node, tuple) and hasattr(kind, "_fields"):  # a namedtuple
        return NodeDef(kind, lambda t: (list(t), type(t)), lambda values, cls: cls(*values))
    if isinstance(node, tuple) and hasattr(node, "indices") and hasattr(node, "_name"):
        # max(dim), sort, topk ...: torch.return_types, rebuilt as the same kind of pair
        return NodeDef(kind, lambda t: (list(t), t._name),
                       lambda values, name: kind(*values, name))
    return None


@dataclass
class TreeSpec:
    """The shape of a pytree without its leaves: a node's type, its context (a dict's keys,
    a namedtuple's class ...) and one spec per child; a leaf's spec is ``LeafSpec()``."""
    type: Any
    context: Any
    children_specs: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_leaves = sum(c.num_leaves for c in self.children_specs)
        self.num_nodes = 1 + sum(c.num_nodes for c in self.children_specs)
        self.num_children = len(self.children_specs)

    def is_leaf(self) -> bool:
        return False

    def unflatten(self, leaves) -> Any:
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} "
                             f"but the spec refers to a pytree that holds {self.num_leaves} "
                             f"items ({self}).")
        return self._build(iter(leaves))

    def _build(self, leaves) -> Any:
        children = [c._build(leaves) for c in self.children_specs]
        unflatten = getattr(self, "_unflatten_fn", None) or SUPPORTED_NODES[self.type].unflatten_fn
        return unflatten(children, self.context)

    def __repr__(self) -> str:
        name = ("namedtuple" if isinstance(self.context, type) and
                issubclass(self.context, tuple) else getattr(self.type, "__name__", self.type))
        inner = ", ".join(repr(c) for c in self.children_specs)
        return f"TreeSpec({name}, {self.context!r}, [{inner}])"


class LeafSpec(TreeSpec):
    def __init__(self) -> None:
        super().__init__(None, None, [])
        self.num_leaves, self.num_nodes = 1, 1

    def is_leaf(self) -> bool:
        return True

    def _build(self, leaves) -> Any:
        return next(leaves)

    def __repr__(self) -> str:
        return "*"


def _flatten(tree, leaves: list, is_leaf) -> TreeSpec:
    node_def = None if is_leaf is not None and is_leaf(tree) else _node_def(tree)
    if node_def is None:
        leaves.append(tree)
        return LeafSpec()
    children, context = node_def.flatten_fn(tree)
    spec = TreeSpec(node_def.type, context, [_flatten(c, leaves, is_leaf) for c in children])
    spec._unflatten_fn = node_def.unflatten_fn
    return spec


def tree_flatten(tree, is_leaf: Callable | None = None) -> tuple[list, TreeSpec]:
    """The leaves of ``tree`` in order, and its spec (``is_leaf`` may stop the descent)."""
    leaves: list = []
    spec = _flatten(tree, leaves, is_leaf)
    return leaves, spec


def tree_unflatten(leaves, treespec: TreeSpec) -> Any:
    """The pytree of shape ``treespec`` holding ``leaves``."""
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"Expected `treespec` to be an instance of PyTreeSpec but got item of "
                        f"type {type(treespec)}.")
    return treespec.unflatten(leaves)


def tree_leaves(tree, is_leaf: Callable | None = None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf: Callable | None = None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func: Callable, tree, *rests, is_leaf: Callable | None = None) -> Any:
    """``tree`` with each leaf replaced by ``func(leaf, *the same leaf of each rest)``; the
    rests must have ``tree``'s shape (they may go deeper where ``tree`` has a leaf)."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [_leaves_as(spec, rest, is_leaf) for rest in rests]
    return spec.unflatten(func(*xs) for xs in zip(leaves, *others))


def tree_map_(func: Callable, tree, *rests, is_leaf: Callable | None = None) -> Any:
    """``func`` called on each leaf (with the rests' leaves) for its effect; gives ``tree``."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [_leaves_as(spec, rest, is_leaf) for rest in rests]
    for xs in zip(leaves, *others):
        func(*xs)
    return tree


def _leaves_as(spec: TreeSpec, tree, is_leaf) -> list:
    """``tree``'s subtrees at ``spec``'s leaves; ValueError where its nodes differ."""
    if spec.is_leaf():
        return [tree]
    node_def = _node_def(tree)
    if node_def is None or node_def.type is not spec.type:
        raise ValueError(f"Node type mismatch; expected {spec.type}, but got {type(tree)}.")
    children, context = node_def.flatten_fn(tree)
    if len(children) != spec.num_children:
        raise ValueError(f"Node arity mismatch; expected {spec.num_children}, but got "
                         f"{len(children)}.")
    if spec.type in (dict, OrderedDict, defaultdict) and context != spec.context:
        raise ValueError(f"Node context mismatch for node type {spec.type}; expected "
                         f"{spec.context!r}, but got {context!r}.")
    return [leaf for child_spec, child in zip(spec.children_specs, children)
            for leaf in _leaves_as(child_spec, child, is_leaf)]


def tree_all(pred: Callable, tree, is_leaf: Callable | None = None) -> bool:
    return all(map(pred, tree_leaves(tree, is_leaf)))


def tree_any(pred: Callable, tree, is_leaf: Callable | None = None) -> bool:
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_iter(tree, is_leaf: Callable | None = None):
    yield from tree_leaves(tree, is_leaf)


def tree_is_leaf(tree, is_leaf: Callable | None = None) -> bool:
    return (is_leaf is not None and is_leaf(tree)) or _node_def(tree) is None


def _selects(type_or_types_or_pred) -> Callable:
    """The leaves a ``*_only`` function acts on: instances of a type (a tuple of types, a
    union), or those a predicate accepts."""
    if isinstance(type_or_types_or_pred, (type, tuple, types.UnionType)):
        return lambda x: isinstance(x, type_or_types_or_pred)
    if callable(type_or_types_or_pred):
        return type_or_types_or_pred
    raise TypeError("Argument must be a type, a tuple of types, or a callable.")


def tree_map_only(type_or_types_or_pred, /, func: Callable, tree,
                  is_leaf: Callable | None = None) -> Any:
    """``tree_map`` over the selected leaves (see ``_selects``); the others stay as they are."""
    selected = _selects(type_or_types_or_pred)
    return tree_map(lambda x: func(x) if selected(x) else x, tree, is_leaf=is_leaf)


def tree_map_only_(type_or_types_or_pred, /, func: Callable, tree,
                   is_leaf: Callable | None = None) -> Any:
    selected = _selects(type_or_types_or_pred)
    return tree_map_(lambda x: func(x) if selected(x) else None, tree, is_leaf=is_leaf)


def tree_all_only(type_or_types, /, pred: Callable, tree, is_leaf: Callable | None = None) -> bool:
    return all(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))


def tree_any_only(type_or_types, /, pred: Callable, tree, is_leaf: Callable | None = None) -> bool:
    return any(pred(x) for x in tree_iter(tree, is_leaf) if isinstance(x, type_or_types))
