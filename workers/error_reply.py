"""A worker's error answer: where an exception happened (the worker, the stage, the innermost
submodule whose code was on the stack) and what it says, a part's ``sys.exit`` included."""
from __future__ import annotations

import traceback

from disthook.service.rpc import error_fields

__all__ = ["error_reply"]


def error_reply(exc: BaseException, worker: str, st=None, inputs=None) -> dict:
    """The fields of the ``error`` answer for ``exc``, raised on worker ``worker`` while it
    ran stage ``st`` (or none). With ``inputs`` (a forward's arrays) the message also says
    what came in. Called in the ``except`` block, for the traceback."""
    exc = _not_an_exit(exc)
    path = None if st is None else _module_in_traceback(st.module, exc.__traceback__)
    message = str(exc)
    if inputs and st is not None:  # (a call of no arrays says nothing of them)
        got = ", ".join(f"{a.dtype} of shape {tuple(a.shape)}" for a in inputs)
        message += f" [the input of {st.name} was {got}]"
    fields = error_fields(exc, worker=worker, traceback=traceback.format_exc(),
                          path=path, stage=None if st is None else st.name)
    fields["message"] = message
    return fields


def _not_an_exit(exc: BaseException) -> BaseException:
    """``exc``, but a SystemExit (a part's or a hook's code called ``sys.exit``) as a
    RuntimeError saying so: the request ends there, the worker serves on (its other clients,
    its other models)."""
    if not isinstance(exc, SystemExit):
        return exc
    err = RuntimeError(f"SystemExit({exc.code!r}): the code this request ran called "
                       f"sys.exit({exc.code!r}); the call ends here, the worker serves on")
    err.__traceback__ = exc.__traceback__
    return err


def _module_in_traceback(root, tb) -> str | None:
    """The path (in ``root``) of the innermost submodule of ``root`` running in ``tb``."""
    paths = {id(m): name for name, m in root.named_modules() if name}
    found = None
    # not the frame that catches the error: it runs still, and reading its f_locals would
    # keep a copy of them in it, the exception among them, and through its traceback every
    # frame's locals (the arrays of a refused output, a failed forward's activations) for
    # as long as the worker ran (a cycle through a frame that outlives the request)
    tb = None if tb is None else tb.tb_next
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and id(owner) in paths:
            found = paths[id(owner)]
        tb = tb.tb_next
    return found
