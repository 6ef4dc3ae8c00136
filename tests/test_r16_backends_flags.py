"""``torch.backends.cuda.matmul.allow_tf32`` is a view of the float32 matmul precision in
torch 2.13 (measured: ``set_float32_matmul_precision("high")`` reads back ``allow_tf32 ==
True``; ``allow_tf32 = True`` makes the precision "high", ``False`` "highest"). timm's and
nanoGPT's scripts set one and log the other; disthook kept them apart (allow_tf32 read False
after "high")."""
import disthook as torch


def test_allow_tf32_follows_the_float32_matmul_precision():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert torch.backends.cuda.matmul.allow_tf32 is False
        torch.set_float32_matmul_precision("high")
        assert torch.backends.cuda.matmul.allow_tf32 is True
        torch.set_float32_matmul_precision("medium")
        assert torch.backends.cuda.matmul.allow_tf32 is True
        torch.backends.cuda.matmul.allow_tf32 = False
        assert torch.get_float32_matmul_precision() == "highest"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
