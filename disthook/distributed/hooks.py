"""The worker hooks a client registers on a deployed model: ``capture``, ``clamp_grad``,
``scale_grad``, ``check_finite``, ``record_norm``, ``clip_grad_norm``, ``by_path``. They
run inside the worker that fires them, with no round trip; what they are is in
``disthook.service.worker_hooks``, which the workers share."""
from disthook.service.worker_hooks import *  # noqa: F403 - this module is their client name
from disthook.service.worker_hooks import __all__  # noqa: F401
