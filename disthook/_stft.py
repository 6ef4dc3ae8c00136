"""``torch.stft`` and ``torch.istft``, written from the ops that have gradients of their own:
frames (``unfold``) times the window, a real transform of each; back, the inverse transform
of each frame, times the window, added up where the frames overlap (``fold``) and divided by
the overlapped windows' squares."""
from __future__ import annotations

import warnings

from disthook import fft
from disthook.ops.complex import ViewAsReal
from disthook.tensor import Tensor, ones


def _window(window, win_length: int, n_fft: int, like: Tensor) -> Tensor:
    """The window as n_fft entries: ``window`` (or ones) centred with zeros on both sides."""
    if window is None:
        window = ones(win_length, dtype=like.dtype.to_real())
    elif window.ndim != 1 or window.shape[0] != win_length:
        raise RuntimeError(f"stft: expected a 1D window tensor of size equal to win_length="
                           f"{win_length}, but got window with size {list(window.shape)}")
    if win_length == n_fft:
        return window
    left = (n_fft - win_length) // 2
    from disthook.nn.functional import pad

    return pad(window, (left, n_fft - win_length - left))


def _sizes(name: str, n_fft: int, hop_length, win_length) -> tuple:
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if hop <= 0:
        raise RuntimeError(f"{name}: expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"{name}: expected 0 < win_length <= n_fft, but got "
                           f"win_length={win}")
    return hop, win


def stft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None,
         center: bool = True, pad_mode: str = "reflect", normalized: bool = False,
         onesided=None, return_complex=None) -> Tensor:
    """The short-time Fourier transform: ``(n_fft // 2 + 1, frames)`` per signal (all n_fft
    frequencies when not ``onesided``), complex."""
    complex_in = input.is_complex() or (window is not None and window.is_complex())
    if return_complex is None and not complex_in:
        raise RuntimeError("stft requires the return_complex parameter be given for real "
                           "inputs, and will further require that return_complex=True in a "
                           "future PyTorch release.")
    if window is None:
        warnings.warn("A window was not provided. A rectangular window will be applied, which "
                      "is known to cause spectral leakage.", UserWarning, stacklevel=2)
    if input.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {input.ndim}D")
    hop, win = _sizes("stft", n_fft, hop_length, win_length)
    x = input if input.ndim == 2 else input.unsqueeze(0)
    if center:
        from disthook.nn.functional import pad

        x = pad(x.unsqueeze(1), (n_fft // 2, n_fft // 2), mode=pad_mode).squeeze(1)
    if not 0 < n_fft <= x.shape[-1]:
        raise RuntimeError(f"stft: expected 0 < n_fft < {x.shape[-1] + 1}, but got "
                           f"n_fft={n_fft}")
    frames = x.unfold(-1, n_fft, hop) * _window(window, win, n_fft, x)
    onesided = not complex_in if onesided is None else onesided
    if onesided and complex_in:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    spec = (fft.rfft if onesided else fft.fft)(frames, norm=norm).transpose(1, 2)
    if input.ndim == 1:
        spec = spec.squeeze(0)
    return spec if return_complex else ViewAsReal.apply(spec)


def istft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None,
          center: bool = True, normalized: bool = False, onesided=None, length=None,
          return_complex: bool = False) -> Tensor:
    """The inverse of ``stft``: each frame transformed back, windowed, overlapped and added,
    divided by the sum of the squared windows where they overlap."""
    from disthook.nn.functional import fold, pad

    if not input.is_complex():
        raise RuntimeError("istft requires a complex-valued input tensor")
    if input.ndim not in (2, 3):
        raise RuntimeError(f"istft: expected a tensor with 2 or 3 dimensions of complex "
                           f"dtype, but got {input.ndim}D")
    hop, win = _sizes("istft", n_fft, hop_length, win_length)
    spec = input if input.ndim == 3 else input.unsqueeze(0)
    onesided = spec.shape[1] != n_fft if onesided is None else onesided
    if onesided and return_complex:
        raise RuntimeError("cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    frames = spec.transpose(1, 2)
    if onesided:
        y = fft.irfft(frames, n=n_fft, norm=norm)
    else:
        y = fft.ifft(frames, n=n_fft, norm=norm)
        if not return_complex:
            y = y.real
    w = _window(window, win, n_fft, y)
    count = frames.shape[1]
    total = n_fft + hop * (count - 1)

    def overlap_add(columns):  # (batch, n_fft, frames) -> (batch, total)
        return fold(columns, (1, total), (1, n_fft), stride=(1, hop)).reshape(
            columns.shape[0], total)

    signal = overlap_add((y * w).transpose(1, 2))
    envelope = overlap_add((w * w).reshape(1, n_fft, 1).expand(1, n_fft, count).contiguous())
    start = n_fft // 2 if center else 0
    end = total - (n_fft // 2 if center else 0) if length is None else start + length
    end = min(end, total)
    if bool((envelope[:, start:end].abs() < 1e-11).any()):
        raise RuntimeError("istft: window overlap add min: the windows' squares add up to 0 "
                           "somewhere; use a window and hop_length that overlap (nonzero "
                           "overlap-add)")
    out = signal[:, start:end] / envelope[:, start:end]
    if length is not None and out.shape[-1] < length:
        out = pad(out, (0, length - out.shape[-1]))
    return out if input.ndim == 3 else out.squeeze(0)
