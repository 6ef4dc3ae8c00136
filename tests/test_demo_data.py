"""The demo's digits are scikit-learn's, read from the file it ships them in without
importing scikit-learn (whose import was a fifth of a quick demo), and through its own
loader where that file is not where it is looked for."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from disthook.demo import model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                reason="the demo's digits come with scikit-learn")


def test_the_digits_are_scikit_learns_to_the_bit():
    from sklearn.datasets import load_digits

    images, target = model.digit_table()
    theirs = load_digits()
    assert images.dtype == theirs.images.dtype and target.dtype == theirs.target.dtype
    np.testing.assert_array_equal(images, theirs.images)
    np.testing.assert_array_equal(target, theirs.target)


def test_reading_them_imports_no_scikit_learn():
    code = ("import sys; from disthook.demo.model import load_digits; d = load_digits(); "
            "print(len(d.y_train) + len(d.y_test), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["1797", "False"]


def test_without_the_file_they_come_through_scikit_learns_loader(monkeypatch):
    from sklearn.datasets import load_digits

    monkeypatch.setattr(os.path, "isfile", lambda path: False)  # not where it is looked for
    images, target = model.digit_table()
    np.testing.assert_array_equal(images, load_digits().images)
    np.testing.assert_array_equal(target, load_digits().target)
