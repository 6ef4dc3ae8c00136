"""The demo's run: train the CNN on two pipeline stages with 1F1B micro-batches while worker
hooks record what happens, then compute class activation maps and draw everything.

Hooks, all running inside the worker that owns the module or parameter:

- every parameter: ``record_norm`` (its gradient's norm, per micro-batch: gradient flow),
  then ``clip_grad_norm`` (the gradient that accumulates is clipped);
- the last layer: ``capture`` of the logits, for the training accuracy of every step;
- the first conv layer, while the test set is evaluated after each epoch: ``capture`` of
  its feature maps;
- the last conv layer's ReLU, for the class activation maps: ``capture`` of its output
  (forward hook) and of the class score's gradient with respect to it (full backward
  hook); see ``disthook.demo.gradcam`` for how they are weighted.
"""
from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path

import numpy as np

import disthook as torch
from disthook import nn
from disthook.demo.gradcam import hires_cam
from disthook.demo.model import (
    CAM_LAYER,
    FIRST_CONV,
    SPLIT_POINTS,
    build_model,
    load_digits,
    one_per_class,
)
from disthook.demo.progress import Progress
from disthook.distributed import DistributedOptimizer, local_cluster
from disthook.service import worker_hooks as hooks

EPOCHS = 12
QUICK_DIGITS = 600  # --quick trains on a subset (of which 20% are kept for the test)
BATCH_SIZE = 64
QUICK_BATCH_SIZE = 16  # more, smaller steps: --quick learns something in its one epoch
CHUNKS = 4  # micro-batches per step
LEARNING_RATE = 3e-3
CLIP_NORM = 0.5  # per parameter and micro-batch
PROBES = 2  # test digits (of different classes) whose first-layer feature maps are drawn


@dataclasses.dataclass
class History:
    """What the hooks and the training loop recorded."""

    loss: list = dataclasses.field(default_factory=list)  # per step
    accuracy: list = dataclasses.field(default_factory=list)  # per step, from captured logits
    test_accuracy: list = dataclasses.field(default_factory=list)  # per epoch
    steps_per_epoch: int = 0
    grad_norms: dict = dataclasses.field(default_factory=dict)  # param -> [[per micro-batch]]
    feature_maps: dict = dataclasses.field(default_factory=dict)  # epoch -> (PROBES, c, h, w)


@dataclasses.dataclass
class Summary:
    """What ``run`` did: the figures it wrote and what it measured."""

    test_accuracy: float
    test_digits: int
    epochs: int
    out: Path
    files: list[str]
    stages: list  # (stage, worker id, children as "(index) Kind") per stage
    hook_counts: dict  # worker id -> {hook name: calls}
    clipped: float  # the share of micro-batch gradients the clip hooks rescaled
    seconds: float
    setup: dict = dataclasses.field(default_factory=dict)  # what the run was: see run_setup

    def hooks_fired(self) -> list[tuple[str, str, dict]]:
        """(worker id, "stage i: (0) Conv2d, (1) ReLU", {hook name: calls}) in stage
        order."""
        holds = {worker: f"stage {stage}: {', '.join(children)}"
                 for stage, worker, children in self.stages}
        return sorted(((worker, holds.get(worker, "no stage"), counts)
                       for worker, counts in self.hook_counts.items()),
                      key=lambda row: row[1])


def run(*, workers: int = 2, epochs: int = EPOCHS, out: str | Path = "disthook-demo",
        quick: bool = False, seed: int = 0, progress: bool = True,
        command: str | None = None) -> Summary:
    """Train, watch with worker hooks, explain with class activation maps, write the
    figures and ``index.html`` to ``out``; a ``Summary``. ``quick``: a subset of the digits.
    ``progress``: say what happens on stderr; ``command``: how it was started, for the page."""
    from disthook.demo import plots, report

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
        raise ValueError(f"the demo runs two pipeline stages: it needs workers >= 2, "
                         f"got {workers!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    started = time.perf_counter()
    say = Progress(enabled=progress)
    batch_size = QUICK_BATCH_SIZE if quick else BATCH_SIZE
    data = load_digits(seed=seed, limit=QUICK_DIGITS if quick else None)
    say.say(f"starting a coordinator and {workers} workers; digits: {len(data.y_train)} to "
            f"train on, {len(data.y_test)} to test")
    model = build_model(seed)
    with local_cluster(workers) as cluster:
        remote = cluster.deploy(model, stages=2, split_points=SPLIT_POINTS,
                                chunks=CHUNKS, schedule="1f1b")
        stages = [(stage, worker, [f"({name}) {type(model._modules[name]).__name__}"
                                   for name in names])
                  for stage, worker, names in remote.workers()]
        for stage, worker, children in stages:
            say.say(f"stage {stage} on worker {worker}: {', '.join(children)}")
        history = train(cluster, remote, data, epochs, seed=seed, progress=say,
                        batch_size=batch_size)
        shown = one_per_class(data.y_test)  # a digit of each class, for the maps
        cam_x, cam_y = data.x_test[shown], data.y_test[shown]
        say.say(f"class activation maps of {len(shown)} test digits, one per class")
        cams, cam_pred = explain(cluster, remote, cam_x)
        counts = cluster.hook_counts()
        say.say("stopping the cluster")
    out = Path(out)
    say.say(f"writing figures and index.html to {out}")
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "curves.png": plots.curves(history, out / "curves.png"),
        "feature_maps.png": plots.feature_maps(data.x_test[shown[:PROBES]],
                                               data.y_test[shown[:PROBES]],
                                               history.feature_maps, out / "feature_maps.png"),
        "gradient_flow.png": plots.gradient_flow(history, CLIP_NORM, out / "gradient_flow.png"),
        "grad_cam.png": plots.grad_cam(cam_x, cam_y, cam_pred, cams, out / "grad_cam.png"),
    }
    norms = np.concatenate([np.ravel(v) for v in history.grad_norms.values()])
    summary = Summary(test_accuracy=history.test_accuracy[-1], test_digits=len(data.y_test),
                      epochs=epochs, out=out.resolve(), files=[*figures, "index.html"],
                      stages=stages, hook_counts=counts,
                      clipped=float(np.mean(norms > CLIP_NORM)),
                      seconds=time.perf_counter() - started,
                      setup=run_setup(model, data, epochs=epochs, batch_size=batch_size,
                                      command=command))
    report.write(out / "index.html", figures, summary)
    return summary


def run_setup(model, data, *, epochs: int, batch_size: int, command: str | None) -> dict:
    """What the run was, as the page shows it: label -> text, in reading order."""
    return {"model": repr(model),
            "placement": f"2 pipeline stages, split before child {SPLIT_POINTS[0]}",
            "optimizer": f"Adam, learning rate {LEARNING_RATE:g}",
            "batch": f"{batch_size} digits, {CHUNKS} micro-batches per step, 1F1B schedule",
            "gradient clipping": f"norm {CLIP_NORM:g} per parameter and micro-batch",
            "data": f"{len(data.y_train)} training and {len(data.y_test)} test digits "
                    "(scikit-learn's 8x8 digits)",
            "epochs": str(epochs),
            "command": command or "disthook.demo.run(...)",
            "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}


def train(cluster, remote, data, epochs: int, *, seed: int = 0,
          progress: Progress | bool = True, batch_size: int = BATCH_SIZE) -> History:
    """Pipelined training steps; after each epoch the test set is evaluated (a line per
    epoch on ``progress``)."""
    say = progress if isinstance(progress, Progress) else Progress(enabled=progress)
    history = History(steps_per_epoch=-(-len(data.y_train) // batch_size))
    opt = DistributedOptimizer(torch.optim.Adam, remote.parameters(), lr=LEARNING_RATE)
    handles = [remote[len(remote) - 1].register_forward_hook(hooks.capture("logits"))]
    for name, _ in remote.named_parameters():
        module, _, attr = name.rpartition(".")
        param = getattr(remote.get_submodule(module), attr)
        handles.append(param.register_hook(hooks.record_norm("grad_norm")))  # before clipping
        handles.append(param.register_hook(hooks.clip_grad_norm(CLIP_NORM)))
        history.grad_norms[name] = []
    rng = np.random.default_rng(seed)
    say.start_training(epochs, history.steps_per_epoch, batch_size)
    try:
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(data.y_train))
            for first in range(0, len(order), batch_size):
                rows = order[first:first + batch_size]
                x, y = torch.from_numpy(data.x_train[rows]), torch.from_numpy(data.y_train[rows])
                losses = remote.train_step(x, y, nn.functional.cross_entropy).numpy()
                opt.step()
                opt.zero_grad()
                # one per micro-batch; emptied on reading, or the buffers would grow
                logits = cluster.captured("logits", details=True, clear=True)
                sizes = [len(item["value"]) for item in _in_micro_batch_order(logits)]
                history.loss.append(float(np.dot(losses, sizes) / sum(sizes)))
                predicted = _stitch(logits).argmax(1)
                history.accuracy.append(float(np.mean(predicted == data.y_train[rows])))
                _record_norms(history, cluster.captured("grad_norm", details=True, clear=True))
                say.step(epoch, epochs, history.loss[-1], history.accuracy[-1])
            history.test_accuracy.append(_evaluate(cluster, remote, data, history, epoch))
            cluster.captured("logits", clear=True)  # the evaluation's, not a step's: dropped
            steps = slice(-history.steps_per_epoch, None)
            say.end_epoch(epoch, epochs, loss=float(np.mean(history.loss[steps])),
                          accuracy=float(np.mean(history.accuracy[steps])),
                          test_accuracy=history.test_accuracy[-1])
    finally:
        say.close()
        for handle in handles:
            handle.remove()
    return history


def _evaluate(cluster, remote, data, history: History, epoch: int) -> float:
    """Test accuracy, with the first conv layer's feature maps captured on its worker (kept
    for the first ``PROBES`` classes)."""
    handle = remote[FIRST_CONV].register_forward_hook(hooks.capture("feature_maps"))
    try:
        with torch.no_grad():
            logits = remote(torch.from_numpy(data.x_test)).numpy()
    finally:
        handle.remove()
    maps = _stitch(cluster.captured("feature_maps", details=True, clear=True))
    history.feature_maps[epoch] = maps[one_per_class(data.y_test)[:PROBES]]
    return float(np.mean(logits.argmax(1) == data.y_test))


def explain(cluster, remote, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class activation maps (``hires_cam``) of the predicted classes of ``x`` at the last
    conv layer's rectified output, on its grid, and the predicted classes (captured on its
    worker: the output by a forward hook, its gradient by a full backward hook)."""
    layer = remote[CAM_LAYER]
    handles = [layer.register_forward_hook(hooks.capture("cam_activations")),
               layer.register_full_backward_hook(hooks.capture("cam_gradients"))]
    try:
        logits = remote(torch.from_numpy(x))
        predicted = logits.detach().numpy().argmax(1)
        one_hot = np.eye(logits.shape[1], dtype=np.float32)[predicted]
        (logits * torch.from_numpy(one_hot)).sum().backward()  # the predicted classes' scores
    finally:
        for handle in handles:
            handle.remove()
    remote.zero_grad()
    activations = _stitch(cluster.captured("cam_activations", details=True, clear=True))
    gradients = _stitch(cluster.captured("cam_gradients", details=True, clear=True))
    return hires_cam(activations, gradients), predicted


def _in_micro_batch_order(items: list[dict]) -> list[dict]:
    return sorted(items, key=lambda item: item["micro_batch"] or 0)


def _stitch(items: list[dict]) -> np.ndarray:
    """The captures of one call, one per micro-batch, as one array in batch order (a
    backward hook's capture is a tuple: its first gradient is taken)."""
    values = [item["value"] for item in _in_micro_batch_order(items)]
    return np.concatenate([np.asarray((v[0] if isinstance(v, tuple) else v).numpy())
                           for v in values])


def _record_norms(history: History, items: list[dict]) -> None:
    """One step's gradient norms: per parameter, one per micro-batch."""
    step: dict[str, list] = {}
    for item in items:
        step.setdefault(item["path"], []).append(float(item["value"]))
    for name, norms in step.items():
        history.grad_norms[name].append(norms)
