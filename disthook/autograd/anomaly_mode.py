"""Autograd anomaly mode (``torch.autograd.detect_anomaly`` / ``set_detect_anomaly``).

While it is on, every graph node made records where in the program's forward it was made
(``node.metadata["traceback_"]``, and ``"parent_"``: the node whose backward made it, for
graphs built by a backward with ``create_graph``); a backward in which a node fails warns
with that traceback before the error goes on, and with ``check_nan`` a node whose gradients
hold NaN raises RuntimeError naming it and the output. While it is off nothing of it is left
in the forward or the engine: the recording and the check are put in place when it is turned
on and taken out when it is turned off.
"""
from __future__ import annotations

import os
import sys
import traceback
import warnings

import numpy as np

from disthook.autograd import graph

__all__ = ["detect_anomaly", "set_detect_anomaly"]

_ENABLED_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime "
                    "and should only be enabled for debugging.")
_NO_FORWARD_INFO = ("No forward pass information available. Enable detect anomaly during "
                    "forward pass for more information.")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_state = {"enabled": False, "check_nan": True}
_plain_init = graph.Node.__init__


# ---- the switch ---------------------------------------------------------------------------

def is_anomaly_enabled() -> bool:
    return _state["enabled"]


def is_anomaly_check_nan_enabled() -> bool:
    return _state["check_nan"]


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """``torch.set_anomaly_enabled``: turn the mode on or off (the recording and the checks
    with it)."""
    enabled, check_nan = bool(enabled), bool(check_nan)
    was = _state["enabled"], _state["check_nan"]
    _state["enabled"], _state["check_nan"] = enabled, check_nan
    if was[0] != enabled:
        _record_nodes(enabled)
    if (was[0] and was[1]) != (enabled and check_nan):
        from disthook.autograd import engine

        engine.set_node_check(_check_nan if enabled and check_nan else None)


class detect_anomaly:
    """Context manager: anomaly mode on inside (``check_nan`` as given), as it was after."""

    def __init__(self, check_nan: bool = True) -> None:
        self.prev = is_anomaly_enabled()
        self.check_nan = check_nan
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        warnings.warn(_ENABLED_WARNING, UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *args) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


class set_detect_anomaly:
    """Sets anomaly mode on or off when made; as a context manager, puts it back after."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *args) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


# ---- recording where each node was made ----------------------------------------------------

def _record_nodes(on: bool) -> None:
    """Nodes are made in two places: ``Function.apply`` of the built-in ops (without
    ``__init__``, through ``ops.base._new``) and ``Node.__init__`` (the rest); while the mode
    is on both record, and off both are put back as they were."""
    from disthook.ops import base

    if on:
        base._new = _new_recording
        graph.Node.__init__ = _init_recording
    else:
        base._new = object.__new__
        graph.Node.__init__ = _plain_init


def _new_recording(cls):
    node = object.__new__(cls)
    _record(node)
    return node


def _init_recording(self) -> None:
    _plain_init(self)
    _record(self)


def _record(node) -> None:
    """The forward's traceback (the program's frames: disthook's own are left out) and the
    node whose backward is running, if any, as torch's anomaly metadata keeps them."""
    frames = [f for f in traceback.extract_stack(sys._getframe(2))
              if not f.filename.startswith(_PACKAGE_DIR)]
    metadata = node.metadata
    metadata["traceback_"] = traceback.format_list(frames)
    parent = _node_running()
    if parent is not None:
        metadata["parent_"] = parent


def _node_running():
    """The node the innermost backward in this thread is evaluating (a local of the engine's
    loop, found on the stack: the engine itself keeps no note of it)."""
    from disthook.autograd import engine

    code = engine._run.__code__
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("node")
        frame = frame.f_back
    return None


# ---- what a backward checks and reports ------------------------------------------------------

def _check_nan(node, grad_inputs) -> None:
    """The engine's check of a node's gradients (after its post-hooks), as torch's."""
    for i, g in enumerate(grad_inputs):
        if g is not None and np.isnan(g._data).any():
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th "
                               "output.")


def report(node) -> None:
    """Warn, as torch does before the error of a failed node goes on, with the forward's
    traceback of the node and of each node whose backward made it."""
    from disthook.utils.hooks import _caller_stacklevel

    level = _caller_stacklevel()
    warnings.warn(_stack_message(node, parent=False), UserWarning, stacklevel=level)
    parent = _metadata(node).get("parent_")
    while parent is not None:
        warnings.warn(_stack_message(parent, parent=True), UserWarning, stacklevel=level)
        parent = _metadata(parent).get("parent_")


def _metadata(node) -> dict:
    return node.metadata_ or {}


def _stack_message(node, parent: bool) -> str:
    trace = _metadata(node).get("traceback_")
    if trace is None:
        return f"Error detected in {node.name()}. {_NO_FORWARD_INFO}"
    trace = "".join(trace)
    if parent:
        return (f"\n\nPrevious calculation was induced by {node.name()}. Traceback of forward "
                f"call that induced the previous calculation:\n{trace}")
    return (f"Error detected in {node.name()}. Traceback of forward call that caused the "
            f"error:\n{trace}")
