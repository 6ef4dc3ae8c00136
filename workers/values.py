"""Values a worker keeps for its clients (``disthook.distributed.remote_values``): the outputs
of the calls a client makes with ``keep``, and the input gradients of its backwards with
``keep_grads``, stay here under ids the client can name in later requests, instead of going
back and forth through the client.

A request names a kept value with ``{"ref": id}``. It is this worker's own, or, with
``from_peer``, one a peer pushes here: the client first asks the worker that holds it to
``send_value`` it (a ``pipe`` message of kind ``value``, straight from worker to worker), and
the request that uses it waits for it in the mailbox. A value that came from a peer is kept here too, so a second use
costs nothing. The client reads a value with ``fetch`` and lets it go with ``drop_values``.
"""
from __future__ import annotations

import numpy as np

import disthook
from disthook import wire
from disthook.service.endpoint import parse
from disthook.service.loop import NO_REPLY, send_frames
from disthook.service.values import kept_record
from workers.limits import mib
from workers.peers import neighbour_identity

__all__ = ["INLINE_BYTES", "MAX_PEERS_NAMED", "MAX_PEER_SOCKETS", "MAX_VALUES",
           "MAX_VALUE_BYTES", "VALUE_OVERHEAD_BYTES", "ValueHandlers", "kept_grads_changed"]

INLINE_BYTES = 256  # a kept value this small goes to the client with its description too
MAX_VALUES = 65536  # values one client may keep on one model here
MAX_VALUE_BYTES = 1 << 30  # the arrays one client's kept values may hold, per worker
# what a kept value costs here beyond its array's bytes (its tensor, id and entry: measured
# 417 B for one of one element), weighed with them by --max-value-mb
VALUE_OVERHEAD_BYTES = 512
# workers this one keeps a connection to for send_value at once: a client names the address
# (``to``), so past this the least recently used goes (closed once what it queued is sent)
MAX_PEER_SOCKETS = 64
MAX_PEERS_NAMED = 64  # addresses one client may have values sent to from here (its workers)


class ValueHandlers:
    """The value requests of ``Worker`` (a mixin: it uses the worker's sockets and state)."""

    def _peer(self, address: str):
        """A DEALER to the worker at ``address`` (one per peer, made on first use; at most
        ``MAX_PEER_SOCKETS``, the least recently used closed first, so that a client naming
        ever new addresses cannot make this worker hold a socket for each)."""
        socks = self.__dict__.setdefault("_peer_socks", {})
        sock = socks.pop(address, None)
        if sock is None:
            while len(socks) >= MAX_PEER_SOCKETS:
                socks.pop(next(iter(socks))).close()  # (its linger sends what it queued)
            sock = self._dial(address, neighbour_identity(self.id, "peer"), linger=1000)
        socks[address] = sock  # the most recently used last
        return sock

    def _count(self, model: str, name: str, n: int) -> None:
        """Add ``n`` bytes to counter ``name`` of ``model`` (``status``'s ``data``)."""
        stats = self.__dict__.setdefault("data_stats", {}).setdefault(model, {})
        stats[name] = stats.get(name, 0) + n

    def on_send_value(self, job):
        """Push the client's values to the worker at ``to`` (in request order: after the
        call that made them). A value that is not here goes as its absence, with why, so
        that the request waiting for it there fails at once instead of timing out."""
        msg = job.msg
        st = self._stage(job)
        parse(msg["to"], "send_value's address")  # (a ValueError that says so, no socket)
        self.check_worker(msg["to"])  # a worker of the cluster only (control.py)
        self._check_named(job, msg["to"])
        sock = self._peer(msg["to"])
        for vid in msg["values"]:
            t = self.state.value(st.model, job.client, vid)
            fields = {"model": st.model, "step": f"{job.client.hex()}/{vid}", "kind": "value",
                      "mb": 0, "data": None, "reason": None}
            if t is None:
                fields["reason"] = (f"value {vid} is not kept on worker {self.id} (the call "
                                    "that made it failed, or it was dropped)")
            else:
                fields["data"] = wire.c_order(t._data)
                self._count(st.model, "bytes_to_peers", fields["data"].nbytes)
            # (never waits: a full queue, nothing taking what goes there, raises)
            send_frames(sock, wire.encode("pipe", fields))
        return NO_REPLY

    def _check_named(self, job, address: str) -> None:
        """Refuse (logged) a client's ``send_value`` to a new address once it has named
        ``MAX_PEERS_NAMED`` (with keys, its key's connections together): its values go to
        the workers of its models, a few; an address made up each time would have this
        worker dial sockets without end."""
        named = self.__dict__.setdefault("_peers_named", {})  # client -> addresses named
        fellows = self._fellows(job.client)
        if any(address in named.get(who, ()) for who in fellows):
            return
        count = sum(len(named.get(who, ())) for who in fellows)
        if count >= MAX_PEERS_NAMED:
            self.peer_log.warning(job.sender, "worker %s: refused send_value of %s to a new "
                                  "address: it named %d already", self.id,
                                  self.who(job.client), count)
            raise RuntimeError(f"this client had values sent from worker {self.id} to "
                               f"{count} addresses, the most one client may: send_value goes "
                               "to the workers that hold its models' stages")
        named.setdefault(job.client, set()).add(address)

    def forget_named(self, client: bytes) -> None:
        """A client went away: the addresses it named go."""
        self.__dict__.get("_peers_named", {}).pop(client, None)

    def on_fetch(self, job):
        """The arrays of the client's values, in order."""
        msg = job.msg
        st = self._stage(job)
        out = []
        for vid in msg["values"]:
            t = self.state.value(st.model, job.client, vid)
            if t is None:
                raise LookupError(f"worker {self.id} keeps no value {vid} of this client: it "
                                  "was dropped (its tensor was collected on the client) or "
                                  "its client reconnected")
            out.append(wire.c_order(t._data))
            self._count(st.model, "bytes_to_client", out[-1].nbytes)
        return {"values": out}

    def on_drop_values(self, job):
        st = self.stages.get(job.msg["model"])
        if st is not None:
            self.state.drop_values(st.model, job.client, job.msg["values"])
        return NO_REPLY

    # ---- for the call and backward handlers ------------------------------------------------
    def _value_of(self, job, model: str, ref: dict) -> np.ndarray:
        """The array of the job's client's value ``ref["ref"]``: kept here, or with
        ``from_peer`` pushed by a peer (waited for; then kept here as well)."""
        vid = ref["ref"]
        t = self.state.value(model, job.client, vid)
        if t is not None:
            return t._data
        if not ref.get("from_peer"):
            raise LookupError(f"worker {self.id} keeps no value {vid} of this client: the "
                              "call that made it failed, or it was dropped")
        key = (model, f"{job.client.hex()}/{vid}", "value", 0)
        wait = self.state.wait_for_pipe(job, (key,), f"value {vid} from another worker")
        if wait is not None:
            self.sleep_on(wait)
        pushed = self.state.mailbox.pop(key, None)
        if pushed is None:
            raise RuntimeError(f"value {vid} did not come from the worker that keeps it")
        if pushed["data"] is None:
            raise RuntimeError(pushed["reason"] or f"value {vid} could not be sent here")
        self._count(model, "bytes_from_peers", pushed["data"].nbytes)
        self.check_value_room(job, model, 1, pushed["data"].nbytes)
        self.state.keep_value(model, job.client, vid, disthook.from_numpy(pushed["data"]))
        return pushed["data"]

    def _resolve_refs(self, job, model: str, data, kept: set | None = None):
        """Packed call data with each ``{"ref": id, "requires_grad": flag}`` replaced by the
        value's array (``{"tensor": array, "requires_grad": flag}``); the ids of those
        arrays added to ``kept``."""
        if isinstance(data, dict):
            if isinstance(data.get("ref"), str) and "requires_grad" in data:
                array = self._value_of(job, model, data)
                if kept is not None:
                    kept.add(id(array))
                return {"tensor": array, "requires_grad": bool(data["requires_grad"])}
            return {k: self._resolve_refs(job, model, v, kept) for k, v in data.items()}
        if isinstance(data, list):
            return [self._resolve_refs(job, model, v, kept) for v in data]
        return data

    def _resolve_grads(self, job, model: str, grads: list) -> list:
        """A backward's output gradients: arrays, None, or ``{"ref": id}`` of kept values."""
        out: list = []
        for g in grads:  # (a {"same": i}: the gradient i, one tensor there, see pairs)
            out.append(g if not isinstance(g, dict) else out[g["same"]] if "same" in g
                       else self._value_of(job, model, g))
        return out

    def _keep_outputs(self, job, model: str, prefix: str, tensors: list,
                      inline: bool = True, saved: set | None = None) -> list[dict]:
        """Keep ``tensors`` (detached) for the job's client under ``<prefix>.<i>``; what
        the answer says of each (``saved``: see ``kept_record``)."""
        self.check_value_room(job, model, len(tensors),
                              sum(t._data.nbytes for t in tensors))
        records = []
        for i, t in enumerate(tensors):
            vid = f"{prefix}.{i}"
            self.state.keep_value(model, job.client, vid, t.detach())
            records.append(kept_record(vid, t, INLINE_BYTES if inline else 0, saved))
        return records

    def check_value_room(self, job, model: str, count: int, nbytes: int) -> None:
        """Refuse to keep ``count`` more values of ``nbytes`` for the job's client past
        ``MAX_VALUES`` (on this model) or ``--max-value-mb`` (all it keeps here; with keys,
        every connection of its key together), each value weighed with what keeping it
        costs besides its array (``VALUE_OVERHEAD_BYTES``); the refusal is logged. Before,
        only the arrays were weighed: values of one element each (4 bytes counted, 417
        kept) held 26 MiB per model and connection where the cap counted 0.25 MiB, and a
        key that kept them on its 64 models would hold 1.7 GiB under a cap of 1 GiB."""
        why = None
        if self.state.values_of(model, job.client) + count > MAX_VALUES:
            why = (f"this client keeps {MAX_VALUES} values of this model on worker {self.id}, "
                   "the most one client may")
        else:
            fellows = self._fellows(job.client)
            held = sum(t._data.nbytes + VALUE_OVERHEAD_BYTES for (_, who), kept
                       in self.state.values.items() if who in fellows for t in kept.values())
            nbytes += count * VALUE_OVERHEAD_BYTES
            if held + nbytes > self.max_value_bytes:
                why = (f"this client's values kept on worker {self.id} hold {mib(held)}, and "
                       f"{mib(nbytes)} more would pass the cap of "
                       f"{mib(self.max_value_bytes)} (--max-value-mb), each value weighed "
                       f"with {VALUE_OVERHEAD_BYTES} bytes more for keeping it")
        if why is not None:
            self.peer_log.warning(job.sender, "worker %s: refused to keep values for %s: %s",
                                  self.id, self.who(job.client), why)
            raise RuntimeError(f"{why}: drop the outputs it no longer uses (del them), or "
                               "call under no_grad() with fewer results held")

    def check_answer_size(self, job, nbytes: int) -> None:
        """Refuse (logged) an answer of a call's outputs past ``--max-value-mb``: what a
        worker computes and sends back is weighed as what it keeps (a broadcast view of a
        few bytes would be copied to its full size for the answer)."""
        if nbytes > self.max_value_bytes:
            why = (f"the call's outputs on worker {self.id} hold {mib(nbytes)}, past the cap "
                   f"of {mib(self.max_value_bytes)} (--max-value-mb)")
            self.peer_log.warning(job.sender, "worker %s: refused an answer to %s: %s",
                                  self.id, self.who(job.client), why)
            raise RuntimeError(f"{why}: ask for less, or keep the outputs on the worker and "
                               "read parts of them")

    def _keep_grads(self, job, model: str, prefix: str, grads: list) -> list:
        """The input gradients of a backward (arrays or None), those there kept under
        ``<prefix>.<j>`` (j counting them alone, as for a call's outputs)."""
        there = [disthook.from_numpy(np.asarray(g)) for g in grads if g is not None]
        # gradients that are one array (an add's two operands) go by reference, not by
        # value: a hook's in-place change of one, made here, is then seen through the other
        shared = len({id(t._data) for t in there}) < len(there)
        records = iter(self._keep_outputs(job, model, prefix, there, inline=not shared))
        return [None if g is None else next(records) for g in grads]


def kept_grads_changed(made: list, sent: list, arrays: list) -> None:
    """A backward's given gradients that are values kept here (``sent``: the request's
    gradients, ``{"ref": id}`` for those; ``arrays``: their arrays, the kept values' own)
    and that a hook changed in place (``made``: (number, tensor, version when made)): the
    change made to the kept value itself, where the backward worked on a copy (a pass that
    may run again). In one process it is one tensor, which an op kept here that gave it to
    several inputs (an add of two calls' outputs) hands to each: the other sees the change."""
    for i, t, version in made:
        if t._vc[0] != version and isinstance(sent[i], dict) and "ref" in sent[i] \
                and t._data is not arrays[i]:
            np.copyto(arrays[i], t._data, casting="unsafe")
