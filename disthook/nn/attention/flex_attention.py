"""``torch.nn.attention.flex_attention``: attention whose scores a function of the program
changes (``score_mod``: ALiBi, soft-capping, relative biases) and whose mask a function
describes (``mask_mod`` in a ``BlockMask``: causal, sliding windows, documents packed in one
sequence), as modded-nanogpt, gpt-fast and torchtune write it.

torch calls the two functions on scalars under ``vmap``; here each is called once, on index
tensors laid out to broadcast (``b`` [B,1,1,1], ``h`` [1,H,1,1], ``q_idx`` [1,1,L,1],
``kv_idx`` [1,1,1,S]), which gives the same for functions written with tensor ops (as torch
requires them to be: no Python branch on a value). Everything is the engine's ops, so
gradients flow to the query, key and value and to tensors ``score_mod`` captures (a learned
bias table). A query row whose keys are all masked gives zeros (its log-sum-exp -inf), as in
torch.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import disthook as torch

__all__ = ["AuxOutput", "AuxRequest", "BlockMask", "and_masks", "create_block_mask",
           "create_mask", "flex_attention", "noop_mask", "or_masks"]


def noop_mask(b, h, q_idx, kv_idx):
    """The mask that keeps every score."""
    return b.new_ones(size=(), dtype=torch.bool)


def and_masks(*mask_mods):
    """A mask that keeps a score where every one of ``mask_mods`` keeps it."""
    def and_mask(b, h, q_idx, kv_idx):
        kept = b.new_ones(size=(), dtype=torch.bool)
        for mask_mod in mask_mods:
            kept = kept & mask_mod(b, h, q_idx, kv_idx)
        return kept
    return and_mask


def or_masks(*mask_mods):
    """A mask that keeps a score where any one of ``mask_mods`` keeps it."""
    def or_mask(b, h, q_idx, kv_idx):
        kept = b.new_zeros(size=(), dtype=torch.bool)
        for mask_mod in mask_mods:
            kept = kept | mask_mod(b, h, q_idx, kv_idx)
        return kept
    return or_mask


def _indices(B: int, H: int, Q_LEN: int, KV_LEN: int):
    """``b, h, q_idx, kv_idx`` as index tensors that broadcast to [B, H, Q_LEN, KV_LEN]."""
    return (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
            torch.arange(Q_LEN).view(1, 1, Q_LEN, 1), torch.arange(KV_LEN).view(1, 1, 1, KV_LEN))


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):
    """The bool mask [B, H, Q_LEN, KV_LEN] (B or H None: 1) that ``mod_fn`` describes."""
    B, H = B or 1, H or 1
    kept = mod_fn(*_indices(B, H, Q_LEN, KV_LEN))
    return kept.to(torch.bool).expand(B, H, Q_LEN, KV_LEN).clone()


@dataclasses.dataclass(eq=False, repr=False)
class BlockMask:
    """What ``create_block_mask`` makes: the shape it was made for, torch's ``BLOCK_SIZE``,
    and the mask itself, ``kept`` (here kept whole; torch keeps which blocks of rows and
    columns hold any kept score, which ``to_dense()`` gives), with the mask function as
    ``mask_mod``. Passed to a placed part of a deployed model, it goes to the worker as
    these fields (a record of them there, which ``flex_attention`` reads as well); its
    ``mask_mod``, code, stays here."""

    shape: tuple
    BLOCK_SIZE: tuple
    kept: object  # a bool tensor [B or 1, H or 1, Q_LEN, KV_LEN]
    mask_mod = None  # (not a field: set by create_block_mask)

    @property
    def seq_lengths(self) -> tuple:
        return tuple(self.shape[2:])

    def to_dense(self):
        """Per block of ``BLOCK_SIZE`` rows and columns, 1 where it keeps any score (int32)."""
        B, H, L, S = self.shape
        rows, cols = self.BLOCK_SIZE
        nq, nk = -(-L // rows), -(-S // cols)
        padded = self.kept.new_zeros((B, H, nq * rows, nk * cols))
        padded[:, :, :L, :S] = self.kept
        blocks = padded.view(B, H, nq, rows, nk, cols).any(dim=5).any(dim=3)
        return blocks.to(torch.int32)

    def __repr__(self) -> str:
        return (f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
                f"mask_mod={getattr(self.mask_mod, '__name__', self.mask_mod)})")


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128,
                      _compile=False, separate_full_blocks=True, compute_dq_write_order=False,
                      dq_kv_order=True) -> BlockMask:
    """A ``BlockMask`` of ``mask_mod`` for ``B`` batches and ``H`` heads (None: any, the
    mask broadcast over them) of ``Q_LEN`` queries and ``KV_LEN`` keys."""
    sizes = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else tuple(BLOCK_SIZE)
    shape = (B or 1, H or 1, Q_LEN, KV_LEN)
    made = BlockMask(shape, sizes, create_mask(mask_mod, B, H, Q_LEN, KV_LEN))
    made.mask_mod = mask_mod
    return made


class AuxRequest(NamedTuple):
    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    lse: object = None
    max_scores: object = None


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *,
                   return_aux=None):
    """softmax(score_mod(query @ key^T * scale) where block_mask keeps it) @ value, with
    query [B, Hq, L, E], key [B, Hkv, S, E] and value [B, Hkv, S, Ev] (Hkv dividing Hq
    with ``enable_gqa``). ``return_lse``: also the log-sum-exp of each row's kept scores;
    ``return_aux``: an ``AuxOutput`` of the ones an ``AuxRequest`` asks for.
    ``kernel_options`` tune torch's kernels and change nothing here."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("flex_attention expects 4-D query, key and value [B, H, L, E], got "
                         f"{query.dim()}-D, {key.dim()}-D and {value.dim()}-D")
    B, Hq, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    if Hq != Hkv:
        if not enable_gqa:
            raise ValueError(f"Expect query and key/value to have the same number of heads but "
                             f"got Hq={Hq} and Hkv={Hkv}. Try setting enable_gqa=True for GQA.")
        if Hq % Hkv:
            raise ValueError(f"Expect number of query heads to be a multiple of kv heads for "
                             f"GQA but got Hq={Hq} and Hkv={Hkv}.")
        key = key.repeat_interleave(Hq // Hkv, dim=1)
        value = value.repeat_interleave(Hq // Hkv, dim=1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if score_mod is not None:
        scores = score_mod(scores, *_indices(B, Hq, L, S))
    if block_mask is not None:
        # (its fields only: on a worker, a record of them stands for it)
        if tuple(block_mask.shape[2:]) != (L, S):
            raise ValueError(f"block_mask was created for block_mask.shape="
                             f"{tuple(block_mask.shape)} but got q_len={L} and kv_len={S}. "
                             "Make a BlockMask of these lengths (create_block_mask)")
        kept = block_mask.kept
        rows = kept.any(dim=-1, keepdim=True)
        scores = torch.where(kept, scores, float("-inf"))
        # a row that keeps nothing: zeros out, never NaN (in backward neither)
        weights = torch.where(rows, scores, 0.0).softmax(dim=-1) * kept.to(scores.dtype)
    else:
        rows = None
        weights = scores.softmax(dim=-1)
    out = weights @ value
    want_lse = return_lse or (return_aux is not None and return_aux.lse)
    if not want_lse and return_aux is None:
        return out
    lse = None
    if want_lse:
        safe = scores if rows is None else torch.where(rows, scores, 0.0)
        lse = safe.logsumexp(dim=-1)
        if rows is not None:
            lse = torch.where(rows.squeeze(-1), lse, float("-inf"))
    if return_aux is None:
        return out, lse
    max_scores = scores.amax(dim=-1) if return_aux.max_scores else None
    return out, AuxOutput(lse=lse if return_aux.lse else None, max_scores=max_scores)
