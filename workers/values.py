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
from disthook.service.loop import NO_REPLY, send_frames
from disthook.service.values import kept_record
from workers.peers import neighbour_identity

__all__ = ["INLINE_BYTES", "MAX_VALUES", "ValueHandlers"]

INLINE_BYTES = 256  # a kept value this small goes to the client with its description too
MAX_VALUES = 65536  # values one client may keep on one model here


class ValueHandlers:
    """The value requests of ``Worker`` (a mixin: it uses the worker's sockets and state)."""

    def _peer(self, address: str):
        """A DEALER to the worker at ``address`` (one per peer, made on first use)."""
        socks = self.__dict__.setdefault("_peer_socks", {})
        sock = socks.get(address)
        if sock is None:
            sock = socks[address] = self._dial(address, neighbour_identity(self.id, "peer"),
                                               linger=1000)
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
            send_frames(sock, wire.encode("pipe", fields))
        return NO_REPLY

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
        self.state.keep_value(model, job.client, vid, disthook.from_numpy(pushed["data"]))
        return pushed["data"]

    def _resolve_refs(self, job, model: str, data):
        """Packed call data with each ``{"ref": id, "requires_grad": flag}`` replaced by the
        value's array (``{"tensor": array, "requires_grad": flag}``)."""
        if isinstance(data, dict):
            if isinstance(data.get("ref"), str) and "requires_grad" in data:
                return {"tensor": self._value_of(job, model, data),
                        "requires_grad": bool(data["requires_grad"])}
            return {k: self._resolve_refs(job, model, v) for k, v in data.items()}
        if isinstance(data, list):
            return [self._resolve_refs(job, model, v) for v in data]
        return data

    def _resolve_grads(self, job, model: str, grads: list) -> list:
        """A backward's output gradients: arrays, None, or ``{"ref": id}`` of kept values."""
        return [self._value_of(job, model, g) if isinstance(g, dict) else g for g in grads]

    def _keep_outputs(self, job, model: str, prefix: str, tensors: list) -> list[dict]:
        """Keep ``tensors`` (detached) for the job's client under ``<prefix>.<i>``; what
        the answer says of each."""
        if self.state.values_of(model, job.client) + len(tensors) > MAX_VALUES:
            raise RuntimeError(
                f"this client keeps {MAX_VALUES} values of this model on worker {self.id}, "
                "the most one client may: drop the outputs it no longer uses (del them), or "
                "call under no_grad() with fewer results held")
        records = []
        for i, t in enumerate(tensors):
            vid = f"{prefix}.{i}"
            self.state.keep_value(model, job.client, vid, t.detach())
            records.append(kept_record(vid, t, INLINE_BYTES))
        return records

    def _keep_grads(self, job, model: str, prefix: str, grads: list) -> list:
        """The input gradients of a backward (arrays or None), those there kept under
        ``<prefix>.<j>`` (j counting them alone, as for a call's outputs)."""
        there = [disthook.from_numpy(np.asarray(g)) for g in grads if g is not None]
        records = iter(self._keep_outputs(job, model, prefix, there))
        return [None if g is None else next(records) for g in grads]
