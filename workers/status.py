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
        counts = self.state.counts()
        mine = self._status_of(job.client)
        stages = [st for st in self.stages.values() if mine(st.keeper) or st.public]
        return {"id": self.id, "pid": os.getpid(), "address": self.address,
                "stages": [st.name for st in self.stages.values()], "memory": rss_bytes(),
                "threads": blas_threads(),  # the BLAS threads set (None: numpy's default)
                "contexts": counts["contexts"], "mailbox": counts["mailbox"],
                # what training steps keep for their backward (counted with the graphs)
                "step_bytes": sum(self.step_graph_bytes().values()),
                "values": counts["values"],
                # per model: bytes sent to other workers (activations, gradients, kept
                # values), kept values taken from them, and kept values read by clients
                "data": {m: dict(c) for m, c in self.__dict__.get("data_stats", {}).items()
                         if any(st.model == m and mine(st.keeper) for st in stages)},
                "waits": counts["waits"], "queued": counts["queued"],
                "hooks_fired": self.captures.fired_for(mine),  # (a key's own, with keys)
                "messages": wire.decoded_count(),
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
                "links": self.link_status(),
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
        account = self.keeper(asker)
        if self.peers.keys is None or account == CLIENT or self.peers.is_worker(asker):
            return lambda keeper: True
        return lambda keeper: keeper == account

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
