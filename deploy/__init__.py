"""Launchers: what starts a cluster's processes on the machines that run them.

A launcher only starts processes and hands each the coordinator's address, a worker id and
the key directory; membership and liveness (the coordinator's registry), placement and
recovery (the client's) stay in disthook's own protocol, so every launcher gives the same
cluster. The command line of each role is made in one place, ``deploy.roles``; the
launchers differ in where they run it:

- ``deploy.local``: child processes of this one (``local_cluster``, ``disthook launch``);
- ``deploy.ssh``: one host per line of a host file (``disthook launch --hosts FILE``);
- ``deploy.ray_launcher``: Ray actors in a placement group (``disthook launch --ray
  [ADDRESS]``);
- ``deploy/slurm/``: an sbatch script; ``deploy/k8s/``: Kubernetes manifests.

See ``deploy/README.md`` for running on several machines.
"""
from deploy.roles import Role, coordinator_role, worker_role

__all__ = ["Role", "coordinator_role", "worker_role"]
