"""Where one stage is in its schedule of a pipelined training step, as plain state: the
actions a step's job carries out, one after another, and the mailbox keys its receives wait
for (the schedules themselves: ``disthook.distributed.schedule``; the mailbox:
``workers.state`` and ``workers.mailbox``)."""
from __future__ import annotations

__all__ = ["StepRun"]


class StepRun:
    """Where one stage is in its schedule of a pipelined training step.

    ``next(mailbox)`` gives the next action to carry out: ``("forward", mb)``, ``("backward",
    mb)``, ``("weight", mb)``, ``("weight_batch", [mb, ...])`` (a run of them in the schedule,
    taken together), ``("send_act", mb)``, ``("send_grad", mb)``, ``("recv", kind, mb,
    message)`` once the message is in the mailbox (taken out of it), ``("wait", keys)`` when it
    is not there yet (call again when one of ``keys`` came), ``("abort", reason)`` when a
    neighbour gave up the step, and ``("done",)`` at the end.
    """

    def __init__(self, model: str, step: str, schedule: list):
        self.model, self.step = model, step
        self.schedule = [(str(kind), int(mb)) for kind, mb in schedule]
        self.position = 0
        # made once, not at every call: the abort's mailbox key, and each receive's
        self._abort = (model, step, "abort", -1)
        self._keys = [(model, step, kind[5:], mb) if kind in ("recv_act", "recv_grad")
                      else None for kind, mb in self.schedule]

    def next(self, mailbox: dict) -> tuple:
        abort = self._abort
        if abort in mailbox:
            return ("abort", mailbox[abort]["reason"])
        if self.position == len(self.schedule):
            return ("done",)
        key = self._keys[self.position]
        if key is not None:  # a receive
            if key not in mailbox:
                return ("wait", (key, abort))
            self.position += 1
            return ("recv", key[2], key[3], mailbox.pop(key))
        kind, mb = self.schedule[self.position]
        if kind == "weight_batch":
            run = [mb]
            self.position += 1
            while (self.position < len(self.schedule)
                   and self.schedule[self.position][0] == kind):
                run.append(self.schedule[self.position][1])
                self.position += 1
            return (kind, run)
        if kind not in ("forward", "backward", "send_act", "send_grad", "weight"):
            raise ValueError(f"unknown schedule action {kind!r}")
        self.position += 1
        return (kind, mb)
