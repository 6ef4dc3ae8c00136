"""torch.stft and torch.istft, made of ops with gradients: values and gradients in float64 /
complex128 against central differences and torch (centre padding, hop, win_length, normalized,
two-sided, the real-pairs form, the round trip), and torch's errors."""
from __future__ import annotations

import pytest
from test_c1_complex import _lib, check

import disthook


@pytest.mark.parametrize("fn, inputs", [
    (lambda x, w: _lib(x).stft(x, 8, window=w, return_complex=True), ((2, 20), (8,))),
    (lambda x, w: _lib(x).stft(x, 8, hop_length=3, win_length=6, window=w, normalized=True, return_complex=True), ((20,), (6,))),
    (lambda x, w: _lib(x).stft(x, 8, window=w, center=False, onesided=False, return_complex=True), ((2, 20), (8,))),
    (lambda x, w: _lib(x).stft(x, 8, window=w, pad_mode="constant", return_complex=False), ((2, 20), (8,))),
    (lambda z, w: _lib(z).istft(z, 8, window=w.abs() + 0.5, length=20), (("c", (2, 5, 6)), (8,))),
    (lambda z, w: _lib(z).istft(z, 8, hop_length=3, window=w.abs() + 0.5, center=True, normalized=True), (("c", (5, 7)), (8,))),
    (lambda x, w: _lib(x).istft(_lib(x).stft(x, 8, window=w.abs() + 0.5, return_complex=True), 8, window=w.abs() + 0.5, length=20), ((2, 20), (8,))),
])
def test_stft_and_istft_match_torch(fn, inputs):
    check(fn, *inputs, node=False)  # (torch's nodes: TransposeBackward1 for its transpose)


@pytest.mark.parametrize("call, message", [
    (lambda x: disthook.stft(x, 8), "requires the return_complex parameter"),
    (lambda x: disthook.stft(x, 8, hop_length=0, return_complex=True), "hop_length > 0"),
    (lambda x: disthook.stft(x, 8, win_length=9, return_complex=True), "win_length <= n_fft"),
    (lambda x: disthook.istft(x, 8), "requires a complex-valued input"),
    (lambda x: disthook.istft(disthook.zeros(5, 3, dtype=disthook.cfloat), 8,
                              window=disthook.zeros(8)), "window overlap add min"),
])
def test_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call(disthook.ones(20))
