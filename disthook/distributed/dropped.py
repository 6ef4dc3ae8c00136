"""A deployed model the program dropped without ``close()``: once nothing here can use its
channel any more (the model, its parameters, its outputs and values all collected), the
channel's sockets close and the workers unload the stages it deployed, as the memory of a
dropped model goes in one process.

Before, the cluster kept every deployment alive until it closed: a notebook cell that
deployed a model again and again kept each old one loaded on the workers, with its sockets
and connections (two sockets and their descriptors per worker here, a connection and the
stage's weights there), for as long as the cluster was open; and ``deploy``/``close`` in a
loop kept every closed deployment too (tests/integration/test_t6_dropped_deployments.py).
"""
from __future__ import annotations

import _thread
import os
import weakref

import zmq

from disthook import wire

__all__ = ["close_when_dropped"]


def close_when_dropped(hub, *, unload: bool) -> None:
    """Close ``hub``'s sockets once it is collected, the workers first told to unload the
    model's stages when ``unload`` (the stages are this deployment's own, not a published
    model's it attached to). The finalizer holds the hub's socket tables, never the hub."""
    done = weakref.finalize(hub, _close, hub.socks, hub.monitors, hub.lost, hub.model,
                            unload, hub._pid)
    done.atexit = False  # at the program's end its connections close as they always did


def _close(socks: dict, monitors: dict, lost: dict, model: str, unload: bool,
           pid: int) -> None:
    """Each socket's monitor off before its reader closes (a monitor nobody reads stalls
    the process's ZeroMQ I/O thread), then the unload (sent without waiting, as ``close``
    sends it), then the socket. A channel closed already has nothing left open."""
    if os.getpid() != pid:  # a forked child must not close the parent's sockets
        return
    try:
        _close_all(socks, monitors, lost, model, unload)
    except KeyboardInterrupt:  # (Ctrl-C while it closed): raised again in the program,
        _thread.interrupt_main()  # where a finalizer's error is only printed
        _close_all(socks, monitors, lost, model, unload=False)  # the rest closed all the same


def _close_all(socks: dict, monitors: dict, lost: dict, model: str, unload: bool) -> None:
    for sock in socks.values():
        if not sock.closed:
            sock.disable_monitor()
    for monitor in monitors:
        monitor.close(linger=0)
    for address, sock in socks.items():
        if sock.closed:
            continue
        if unload and address not in lost:
            try:  # never waits: a finalizer runs inside whatever the program was doing
                sock.send_multipart(wire.encode("unload", {"model": model}), zmq.NOBLOCK)
            except zmq.ZMQError:  # no connection to take it now: the worker drops the
                pass  # connection's graphs when it closes, the stages stay loaded
        sock.close(linger=500 if unload else 0)
