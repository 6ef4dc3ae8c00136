"""What a worker says of itself when asked (``status``): its process, its stages and their
clients, its counters and its limits (a mixin of ``Worker``)."""
from __future__ import annotations

import os

from deploy.threads import blas_threads
from disthook import wire
from disthook.service.security import CLIENT
from workers.stage_parts import rss_bytes

__all__ = ["StatusHandlers"]


class StatusHandlers:
    def on_status(self, job):
        mine, own = self.view_of(job.client)
        everyone = own is None
        counts = self.state.counts(own)
        stages = [st for st in self.stages.values() if mine(st.keeper) or st.public]
        steps = self.step_graph_bytes()
        return {"id": self.id, "pid": os.getpid(), "address": self.address,
                "stages": self.stage_names_for(job.client),
                "memory": rss_bytes(),
                "threads": blas_threads(),  # the BLAS threads set (None: numpy's default)
                # the asker's key's own (with keys; the cluster's own keys: everyone's)
                "contexts": counts["contexts"], "mailbox": counts["mailbox"],
                # what training steps keep for their backward (counted with the graphs)
                "step_bytes": sum(n for who, n in steps.items() if everyone or own(who)),
                "values": counts["values"],
                # per model: bytes sent to other workers (activations, gradients, kept
                # values), kept values taken from them, and kept values read by clients
                "data": {m: dict(c) for m, c in self.__dict__.get("data_stats", {}).items()
                         if any(st.model == m and mine(st.keeper) for st in stages)},
                "waits": counts["waits"], "queued": counts["queued"],
                "hooks_fired": self.captures.fired_for(mine),  # (a key's own, with keys)
                # every client's messages, a count that moves with each: the cluster's own
                # keys only
                **({"messages": wire.decoded_count()} if everyone else {}),
                # per stage: micro-batch forwards run so far, client and worker hooks held,
                # client hook firings run ahead of their answers, passes run again since,
                # results sent to the client before such answers were taken (the four
                # counts of every client's: only of a stage of the asker's key)
                "stage_stats": {st.name: {"forwards": st.forwards,
                                          **({"hooks": len(st.hooks),
                                              "hooks_ahead": st.ran_ahead,
                                              "passes_again": st.ran_again,
                                              "answers_ahead": st.answered_ahead}
                                             if mine(st.keeper) else {}),
                                          "modules": list(st.module._modules),
                                          "parameters": st.parameters,
                                          "clients": self._clients_of(st, mine)}
                                for st in stages},
                # neighbours on this host over local links (workers/links.py)
                "links": self._links(None if everyone else {st.name for st in stages}),
                "limits": {"contexts": self.max_contexts, "hooks": self.max_hooks,
                           "graph_bytes": self.max_graph_bytes,
                           "value_bytes": self.max_value_bytes}}

    def _status_of(self, asker: bytes):
        """Whose stages and clients ``status`` details to ``asker``, as a test of a key's
        account (``keeper``): with keys, a client's own key's, beside the published models'
        stages (not their other clients); everyone's to the cluster's own keys (the servers',
        the admin's ``client``) and without keys. Before, any key read, for every stage, its
        modules, parameters and forwards, and each client's graphs and hooks: another key's
        unpublished model and when it ran, and what the other clients of a shared one did."""
        if self._sees_all(asker):
            return lambda keeper: True
        account = self.keeper(asker)
        return lambda keeper: keeper == account

    def view_of(self, asker: bytes):
        """What ``asker`` reads of status and waits: ``mine``, a test of a stage's keeper
        (``_status_of``), and ``own``, a test of a client (None: every client's)."""
        mine = self._status_of(asker)
        if self._sees_all(asker):
            return mine, None
        return mine, lambda client: mine(self.keeper(client))

    def _sees_all(self, asker: bytes) -> bool:
        """Whether ``asker`` reads every client's part of ``status``: without keys every
        peer, with keys the cluster's own (the servers', the admin's ``client``). Any other
        key reads the names of its own and the published stages (of the others only how
        many), and its own key's totals: before, it read every stage's name (another key's
        model ids) and the worker's totals, which moved with every other client's graphs,
        values, waits, queued requests and messages."""
        return (self.peers.keys is None or self.keeper(asker) == CLIENT
                or self.peers.is_worker(asker))

    def stage_names_for(self, asker: bytes) -> list[str]:
        """The names of the stages ``asker`` may read of (its key's own and the published
        ones; every one for the cluster's own keys and without keys): what ``status`` and
        an error naming what this worker holds tell it. Before, a request naming a model
        this worker does not hold was answered with every stage's name."""
        mine = self._status_of(asker)
        return [st.name for st in self.stages.values() if mine(st.keeper) or st.public]

    def keepers(self) -> dict:
        """A heartbeat's ``keepers``, with keys: whose each stage is, by its index in the
        beat's ``stages`` (key name -> indices; "" -> published), so that the coordinator's
        status names a stage only to whom this worker's does. Nothing without keys."""
        if self.peers.keys is None:
            return {}
        out: dict[str, list[int]] = {}
        for i, st in enumerate(self.stages.values()):
            keeper = "" if st.public else st.keeper
            if isinstance(keeper, str):  # (a key's name; a connection's: no key, nobody's)
                out.setdefault(keeper, []).append(i)
        return {"keepers": out}

    def _links(self, visible: set[str] | None) -> dict:
        """``link_status``, to a key that does not see everything (``visible``: the names of
        the stages it sees) without the other stages and the counts every client's steps
        move (its waits on the links, the records through their arenas)."""
        links = self.link_status()
        if visible is None:
            return links
        return {"listening": links["listening"], "in": links["in"],
                "stages": {n: v for n, v in links["stages"].items() if n in visible}}

    def _clients_of(self, st, mine) -> dict[str, dict]:
        """Per client of a stage (those ``mine`` passes: see _status_of): graphs kept, hooks
        registered, and whether it is the deployer. Clients are named by their key (with
        keys) or a number given here, never by their connection's identity, which another
        client could use."""
        graphs, steps = self.state.clients_of(st.model), self.step_graph_bytes(st.model)
        out: dict[str, dict] = {}
        for who in sorted({*graphs, *steps, *(c for c, _ in st.hooks), st.owner}):
            if not mine(self.keeper(who)):
                continue
            out[self.peers.label(who)] = {"contexts": graphs.get(who, 0),
                                     "step_bytes": steps.get(who, 0),
                                     "hooks": sum(1 for c, _ in st.hooks if c == who),
                                     "owner": who == st.owner}
        return out
