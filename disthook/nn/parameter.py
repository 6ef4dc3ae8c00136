"""``Parameter`` and ``Buffer``: tensors a Module registers by attribute assignment."""
from __future__ import annotations

from disthook.tensor import Tensor, empty


class Parameter(Tensor):
    """A Tensor that ``Module.__setattr__`` records in ``_parameters``.

    It shares storage (and version counter) with the tensor it is made from, like
    ``tensor.detach()``, so it is always a leaf; ``requires_grad`` defaults to True.
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Parameter(): argument 'data' must be Tensor, not {type(data).__name__}")
        param = object.__new__(cls)
        Tensor._init(param, data._data, None, 0)
        param._vc = data._vc
        param.requires_grad = requires_grad
        return param

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        pass  # everything happens in __new__; Tensor.__init__ is the legacy constructor

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self._data, self._requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = Parameter(Tensor._make(self._data.copy(), None, 0), self._requires_grad)
        if self._grad is not None:
            result._grad = self._grad.__deepcopy__(memo)
        memo[id(self)] = result
        return result


def _rebuild_parameter(data, requires_grad: bool) -> Parameter:
    return Parameter(Tensor._make(data, None, 0), requires_grad)


class _BufferMeta(type):
    """``isinstance(t, Buffer)`` holds for any Tensor that ``Buffer(...)`` marked."""

    def __instancecheck__(cls, instance) -> bool:
        if cls is Buffer and isinstance(instance, Tensor) and getattr(instance, "_is_buffer",
                                                                      False):
            return True
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """Marks a tensor as module state that is not a parameter (``nn.Buffer``).

    As in torch, ``Buffer(t)`` returns a plain Tensor (``t`` detached, its requires_grad
    kept) flagged with ``persistent``; assigning it to a Module attribute registers a buffer.
    """

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            data = empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t


# ---- placeholders of lazy modules ------------------------------------------------------------

class UninitializedTensorMixin:
    """A tensor whose shape a lazy module does not know yet; ``materialize`` gives it one
    (uninitialised values) and makes it the ordinary class (``cls_to_become``)."""

    cls_to_become: type = Tensor

    def materialize(self, shape, device=None, dtype=None) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.data = empty(shape, dtype=self.dtype if dtype is None else dtype)
        self.__class__ = self.cls_to_become

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """The parameter of a lazy module before its first input: ``Parameter`` once sized."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return Parameter.__new__(cls, empty(0, dtype=dtype), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None) -> None:
        pass


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """The buffer of a lazy module before its first input: a plain Tensor once sized."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None,
                persistent: bool = True):
        t = object.__new__(cls)
        Tensor._init(t, empty(0, dtype=dtype)._data, None, 0)
        t.requires_grad = requires_grad
        t.persistent = persistent
        return t

    def __init__(self, requires_grad: bool = False, device=None, dtype=None,
                 persistent: bool = True) -> None:
        pass
