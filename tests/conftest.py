import warnings

import pytest


@pytest.fixture(autouse=True)
def _fresh_grad_mode():
    """Every test starts with grad mode on and leaves it so."""
    from disthook.autograd import grad_mode

    grad_mode._state.enabled = True
    yield
    grad_mode._state.enabled = True


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield
