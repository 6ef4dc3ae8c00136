"""Optimizer calls the client has not sent yet (``OptimizerCalls``, a mixin of the client's
channel): ``optimizer.step()`` and ``zero_grad()`` of a deployed model's optimizer are the
program's at once, but ride with the next forward through every stage (no round trip of
their own) or go, in order and waited for, before any other request. Each is numbered, so
that a stage that ran one runs it once, however often it is sent (a carrier that failed
sends them again)."""
from __future__ import annotations

import itertools

__all__ = ["OptimizerCalls"]

_call_numbers = itertools.count(1)  # numbers each optimizer call this process makes


class OptimizerCalls:
    """Mixin of ``_Hub``: its ``pending_optimizer`` (each entry {address: optimizer_call
    there}, in the order the program made them), ``issued`` and ``write_all``."""

    def defer(self, calls: dict) -> None:
        """Optimizer call ``{address: optimizer_call}`` rides with the next forward (or goes
        before any other request); each copy is numbered, so that a stage that ran it runs
        it once only, however often it is sent."""
        number = next(_call_numbers)
        self.issued += 1  # (sent later, but the program's from now on)
        self.pending_optimizer.append({address: {**spec, "call": number}
                                       for address, spec in calls.items()})

    def flush_optimizer_calls(self) -> None:
        """Send the optimizer calls no forward has carried, in order, waiting for each."""
        pending, self.pending_optimizer = self.pending_optimizer, []
        for i, calls in enumerate(pending):
            action = next(iter(calls.values()))["action"]
            try:
                self.write_all([(address, "step", {"optimizer": spec})
                                for address, spec in calls.items()],
                               what=f"optimizer {action}", carries_optimizer_calls=True)
            except BaseException:
                self.pending_optimizer[:0] = pending[i:]  # they go again (each runs once)
                raise

    def optimizer_calls_to(self, address: str, index: int, stages: int) -> list | None:
        """The pending optimizer calls of the stage at ``address`` alone (stage ``index`` of
        ``stages``), as the optimizer_calls field of a forward of one of its parts (None
        when it has none). They stay pending until ``carried`` says that forward answered:
        if it failed they go again (the stage skips those it ran)."""
        specs = [calls[address] for calls in self.pending_optimizer if address in calls]
        if not specs:
            return None
        field: list[list[dict]] = [[] for _ in range(stages)]
        field[index] = specs
        return field

    def carried(self, address: str, specs: list[dict]) -> None:
        """The forward that carried ``specs`` (from ``optimizer_calls_to``) to ``address``
        answered: they are sent."""
        numbers = {spec["call"] for spec in specs}
        for calls in self.pending_optimizer:
            if address in calls and calls[address]["call"] in numbers:
                del calls[address]
        self.pending_optimizer = [calls for calls in self.pending_optimizer if calls]

    def take_optimizer_calls(self, addresses: list) -> tuple[list, list[list[dict]] | None]:
        """The pending optimizer calls, taken, and the same as a forward field: per stage
        (at ``addresses``), its calls in order (None when nothing is pending). Put them
        back (``pending_optimizer[:0] = taken``) if the carrier fails: a stage that ran
        one before skips it."""
        pending, self.pending_optimizer = self.pending_optimizer, []
        if not pending:
            return pending, None
        per_stage: list[list[dict]] = [[] for _ in addresses]
        for calls in pending:
            for index, address in enumerate(addresses):
                spec = calls.get(address)
                if spec is not None:
                    per_stage[index].append(spec)
        return pending, per_stage
