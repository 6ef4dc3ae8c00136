"""``torch._dynamo.eval_frame``: where torch defines ``OptimizedModule``, the module
``torch.compile`` gives back; programs ask ``isinstance(model, ...)`` there to reach the
module inside (diffusers' ControlNet pipelines, peft's examples)."""
from disthook.compiler import OptimizedModule

__all__ = ["OptimizedModule"]
