"""A local link's shared memory (an *arena*): where the arrays of large pipe records go,
written once by the sending worker, and read by the receiving one where they lie (the
received array is a view of the arena), so that only their header crosses the link's
socket.

The dialing end of a link makes the arena (``Arena.create``): an anonymous memory file
(``memfd_create``: it has no name, in /dev/shm or anywhere, and goes when the last process
that maps it unmaps it or dies), sealed against shrinking and growing, and hands it to the
accepting end with its hello (``SCM_RIGHTS``), which maps it (``Arena.adopt``). Both ends
run as one user (the link's SO_PEERCRED check); no other process holds the file.

A record goes in a *block*: a 64-byte head holding its state, then its bytes. The writer
places each record in the first gap, from the arena's start, that holds its block
(``Arena.place``; none: the record goes on the socket, as one too large for the arena
does), marks the block HELD and sends its place in the record's header. The reader's array
is a view of the block (``Arena.take``); when that array and every view of it are gone the
reader marks the block FREED, and the writer takes it back at its next placement. A block
is thus never written while anything of the reader's can read it, whatever holds the
received array and for how long (the schedule's micro-batches, a hook that keeps it).

Ordering: the reader's last read of a block must be done before the writer sees it FREED.
Python stores the state once the array's last reference went, after every read of it; on
x86-64 a store is never seen before the loads before it, which is why the arena is used
there alone (elsewhere links carry every array on their socket, as before).
"""
from __future__ import annotations

import fcntl
import mmap
import os
import platform
import stat
import struct
import weakref

import numpy as np

__all__ = ["ARENA_MIN_RECORD", "Arena", "ArenaError", "arena_bytes"]

DEFAULT_MB = 8  # the arena of each link, MiB (DISTHOOK_LINK_ARENA_MB; 0: none)
MAX_MB = 1024
CONTROL = 4096  # bytes before the blocks (kept free: a page of their own)
ALIGN = 64  # each block's place is a multiple of this
HEAD = 64  # a block's state (``<Q``: HELD, FREED), then its record
HELD, FREED = 0, 1
ARENA_MIN_RECORD = 16 << 10  # arrays under this go on the socket (a copy there costs little)
_STATE = struct.Struct("<Q")
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL if hasattr(
    fcntl, "F_SEAL_SHRINK") else 0


class ArenaError(ValueError):
    """What came for an arena, or a record's place in it, is off."""


def arena_bytes() -> int:
    """The bytes of the arena a link this worker dials makes (0: none): ``DISTHOOK_LINK_ARENA_MB``
    MiB (default 8, at most 1024; 0 turns arenas off), on x86-64 Linux only (see the module's
    note on ordering)."""
    raw = os.environ.get("DISTHOOK_LINK_ARENA_MB", str(DEFAULT_MB)).strip()
    try:
        mb = int(raw)
    except ValueError:
        raise ValueError(f"DISTHOOK_LINK_ARENA_MB={raw!r}: expected a whole number of MiB "
                         f"from 0 (no arena) to {MAX_MB}") from None
    if not 0 <= mb <= MAX_MB:
        raise ValueError(f"DISTHOOK_LINK_ARENA_MB={mb}: expected 0 (no arena) to {MAX_MB}")
    if (not mb or not _SEALS or not hasattr(os, "memfd_create")
            or platform.machine().lower() not in ("x86_64", "amd64")):
        return 0
    return CONTROL + (mb << 20)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Arena:
    """One link's ring, mapped; ``fd``: the memory file while this end still holds it (the
    writer's until its hello carried it)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size, self.ring = fd, size, size - CONTROL
        self.map = mmap.mmap(fd, size)
        self.held: list[tuple[int, int]] = []  # the writer's blocks not known freed, in order
        self.lent: dict = {}  # the reader's: id -> (a weak reference to a record's array,
        # where its block's state lies)
        self.records = 0  # placed / taken

    @classmethod
    def create(cls, size: int) -> Arena:
        """A fresh arena of ``size`` bytes (``OSError`` where one cannot be made)."""
        fd = os.memfd_create("disthook-link", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise
    
    @classmethod
    def adopt(cls, fd: int) -> Arena:
        """The arena a dialer's hello carried (``fd``, taken: closed here whatever comes);
        ``ArenaError`` where it is not a sealed memory file of an arena's size."""
        try:
            info = os.fstat(fd)
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS) if _SEALS else 0
            if not stat.S_ISREG(info.st_mode) or seals & _SEALS != _SEALS:
                raise ArenaError("the hello's file is not a sealed memory file")
            if not CONTROL + ALIGN <= info.st_size <= CONTROL + (MAX_MB << 20):
                raise ArenaError(f"the hello's arena has {info.st_size} bytes (expected "
                                 f"{CONTROL + ALIGN} to {CONTROL + (MAX_MB << 20)})")
            arena = cls(fd, info.st_size)
        except OSError as exc:
            raise ArenaError(f"the hello's arena cannot be mapped: {exc}") from None
        finally:
            os.close(fd)
        arena.fd = -1
        return arena

    def release_fd(self) -> None:
        """This end no longer needs the file itself (its mapping keeps the memory)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # ---- the writer -----------------------------------------------------------------------
    def place(self, body: memoryview) -> int | None:
        """Copy ``body`` (bytes) into the arena: its block's place, or None where the arena
        has no room for it now (the record goes on the socket). The block goes in the first
        gap, from the arena's start, that holds it once the blocks the reader freed are
        taken back: the bytes a link reuses stay few (in the processor's cache)."""
        need = HEAD + _aligned(len(body))
        if need > self.ring:
            return None
        flags, base = self.map, CONTROL
        held = [b for b in self.held if not _STATE.unpack_from(flags, base + b[0])[0]]
        at = 0
        for i, (start, end) in enumerate(held):
            if start - at >= need:
                break
            at = end
        else:
            i = len(held)
            if self.ring - at < need:
                self.held = held
                return None
        held.insert(i, (at, at + need))
        self.held = held
        _STATE.pack_into(flags, base + at, HELD)
        base += at + HEAD
        flags[base:base + len(body)] = body
        self.records += 1
        return at

    # ---- the reader -----------------------------------------------------------------------
    def take(self, start: int, n: int) -> np.ndarray:
        """The record of ``n`` bytes in the block at ``start``: an array that is a view of
        it (writable), the block freed when that array and every view of it are gone;
        ``ArenaError`` where no block can be there."""
        if start % ALIGN or not 0 <= start <= self.ring - HEAD - n:
            raise ArenaError(f"a record of {n} bytes said to be at {start} in an arena of "
                             f"{self.ring} (its blocks are {ALIGN}-byte aligned)")
        at = CONTROL + start + HEAD
        # (a view of a memoryview: every array made from it has it as its base, so that it
        # lives as long as any of them, where views of views of the map would skip it)
        data = np.frombuffer(memoryview(self.map)[at:at + n], np.uint8)
        ref = weakref.ref(data, self._freed)
        self.lent[id(ref)] = (ref, CONTROL + start)
        self.records += 1
        return data

    def _freed(self, ref) -> None:
        """Every view of a record is gone: its block is the writer's again (after the last
        read of it: see the module's note)."""
        _, at = self.lent.pop(id(ref), (None, None))
        if at is not None and self.map is not None:
            _STATE.pack_into(self.map, at, FREED)

    def close(self) -> None:
        """Unmap it (where records the reader holds are views of it, when the last goes)."""
        self.release_fd()
        mapped, self.map = self.map, None
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:  # (records still held here: the map goes with them)
                pass
