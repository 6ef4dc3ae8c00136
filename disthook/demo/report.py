"""The demo's ``index.html``: every figure with one line on what it shows."""
from __future__ import annotations

import html
from pathlib import Path

HEADINGS = {"curves.png": "Loss and accuracy",
            "feature_maps.png": "Feature maps of the first conv layer",
            "gradient_flow.png": "Gradient flow",
            "grad_cam.png": "Class activation maps (Grad-CAM)"}
EXPLANATIONS = {
    "curves.png": "Training loss and accuracy per pipelined step (accuracy from the logits a "
                  "capture hook kept on the last stage's worker), and test accuracy after "
                  "each epoch; the dotted lines mark where one epoch ends and the next "
                  "begins. The loss axis is logarithmic.",
    "feature_maps.png": "What the first conv layer's filters respond to in two test digits, "
                        "after the first and the last epoch, kept by a capture forward hook "
                        "on the worker that owns the layer.",
    "gradient_flow.png": "Every parameter's gradient norm per micro-batch, recorded by "
                         "record_norm tensor hooks on the owning workers before "
                         "clip_grad_norm hooks clip it at the dashed line. Left: over the "
                         "steps; right: each parameter's mean and largest norm over the run "
                         "(both on log axes).",
    "grad_cam.png": "Where the evidence for the predicted class lies: the last conv layer's "
                    "rectified output and the class score's gradient with respect to it, "
                    "captured by a forward and a full backward hook on its worker, multiplied "
                    "at each position and summed over the channels (Grad-CAM with the "
                    "gradient kept per position, HiResCAM: this CNN's Flatten and Linear "
                    "weigh every position on its own, and Grad-CAM's mean gradient per "
                    "channel leaves about half the maps blank). The middle row is the map as "
                    "computed, one cell per position of the layer's 8x8 output (max pooling "
                    "passes gradient to one position of each 2x2 block); the bottom row is "
                    "the same map upsampled (bilinear) to 28x28 over the digit.",
}

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>disthook demo</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
table {{ border-collapse: collapse; }}
pre {{ margin: 0; text-align: left; font-size: 0.85em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
</style>
</head>
<body>
<h1>disthook demo</h1>
<p>A small CNN learned scikit-learn's 8&times;8 digits on {stages} pipeline stages
(1F1B, 4 micro-batches per step) in {epochs} epoch(s): test accuracy
<b>{accuracy:.1%}</b> on {digits} digits. Every hook below ran inside the worker that owns
its layer or parameter; the clip hooks rescaled {clipped:.1%} of the micro-batch gradients.</p>
<h2>Run setup</h2>
{setup}
<h2>Hooks fired per worker</h2>
{counts}
{sections}
</body>
</html>
"""


def write(path: Path, figures: dict, summary) -> None:
    """``index.html`` at ``path`` showing ``figures`` (file names relative to it)."""
    sections = "\n".join(
        f'<h2>{html.escape(HEADINGS[name])}</h2>\n<p>{html.escape(EXPLANATIONS[name])}</p>\n'
        f'<img src="{html.escape(file)}" alt="{html.escape(HEADINGS[name])}">'
        for name, file in figures.items())
    Path(path).write_text(PAGE.format(
        stages=len(summary.stages), epochs=summary.epochs, accuracy=summary.test_accuracy,
        digits=summary.test_digits, clipped=summary.clipped, sections=sections,
        counts=_counts_table(summary), setup=_setup_table(summary.setup)),
        encoding="utf-8")


def _setup_table(setup: dict) -> str:
    """The run's setup, a row per item; the model as printed, the command as code."""
    def cell(label, text):
        if label == "model":
            return f"<pre>{html.escape(text)}</pre>"
        if label == "command":
            return f"<code>{html.escape(text)}</code>"
        return html.escape(text)

    rows = "".join(f'<tr><th>{html.escape(label)}</th><td style="text-align: left">'
                   f"{cell(label, text)}</td></tr>\n" for label, text in setup.items())
    return f'<table class="setup">\n{rows}</table>'


def _counts_table(summary) -> str:
    rows = summary.hooks_fired()
    names = sorted({name for _, _, counts in rows for name in counts})
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = "".join(f"<tr><td>{html.escape(worker)} ({html.escape(holds)})</td>"
                   + "".join(f"<td>{counts.get(n, 0)}</td>" for n in names) + "</tr>\n"
                   for worker, holds, counts in rows)
    return f"<table>\n<tr><th>worker</th>{head}</tr>\n{body}</table>"
