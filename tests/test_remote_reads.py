"""How a read of a kept value's ``_data`` is classified (``remote_values._read_kind``): a read
whose next instruction takes only metadata (``.shape``, ``.dtype``...) must not fetch the
value, whichever offset inside the reading instruction the interpreter reports (CPython 3.12
reports a property load it has specialised at the load's last inline cache entry)."""
import dis
import itertools

from disthook.distributed import remote_values as rv


def _shapes_differ(a, b):
    return a._data.shape != b._data.shape


def _whole_value(a):
    return a._data + 1


def _offsets_of_data_loads(code):
    """(first, last) offset each ``_data`` load spans: up to the next instruction, its
    inline caches included."""
    ins = list(dis.get_instructions(code))
    return [(i.offset, nxt.offset - 2) for i, nxt in itertools.pairwise(ins)
            if i.opname.startswith("LOAD_ATTR") and i.argval == "_data"]


def test_a_metadata_read_is_metadata_at_every_offset_of_the_load():
    code = _shapes_differ.__code__
    spans = _offsets_of_data_loads(code)
    assert len(spans) == 2
    for first, last in spans:
        for offset in range(first, last + 1, 2):
            assert rv._read_kind(code, offset) == rv._META, (offset, first, last)


def test_a_value_read_is_a_value_read_at_every_offset_of_the_load():
    code = _whole_value.__code__
    (first, last), = _offsets_of_data_loads(code)
    for offset in range(first, last + 1, 2):
        assert rv._read_kind(code, offset) == rv._VALUE


def _kept_then_added(a, e):
    d = a._data
    return d + e  # CPython 3.13 loads d and e with one instruction


def _kept_then_added_after(a, e):
    d = a._data
    return e + d


def _kept_for_its_shape(a):
    d = a._data
    return d.shape, d.dtype


def _kept_in_a_comprehension(a, rows):
    d = a._data
    return [d for _ in rows]


def _kind_of_the_read(fn):
    (first, _last), = _offsets_of_data_loads(fn.__code__)
    return rv._read_kind(fn.__code__, first)


def test_a_kept_local_used_as_a_value_is_a_value_read_in_every_python():
    for fn in (_kept_then_added, _kept_then_added_after, _kept_in_a_comprehension):
        assert _kind_of_the_read(fn) == rv._VALUE, fn.__name__


def test_a_kept_local_read_only_for_metadata_is_a_metadata_read():
    assert _kind_of_the_read(_kept_for_its_shape) == rv._META


def _kept_for_its_shape_beside_another_local(a, fill):
    d = a._data
    return (d.shape, fill, d.dtype)  # CPython 3.13 loads fill and d with one instruction


def test_a_kept_local_loaded_second_of_a_pair_for_metadata_is_a_metadata_read():
    assert _kind_of_the_read(_kept_for_its_shape_beside_another_local) == rv._META
