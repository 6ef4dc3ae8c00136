"""The demo's class activation maps (issue 34): at the layer and with the weighting the demo
uses, on its CNN trained in one process, the heat lies mostly on the digit's pixels for
most test digits; the upsampling is torch's bilinear one."""
import importlib.util

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.demo.gradcam import grad_cam, heat_on_ink, hires_cam, upsample
from disthook.demo.model import CAM_LAYER, build_model, load_digits
from disthook.demo.train import BATCH_SIZE, LEARNING_RATE

EPOCHS = 4  # about 97% test accuracy

# looked for, not imported: the tests that load the digits import it, where they run
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                reason="the demo's digits come with scikit-learn")


@pytest.fixture(scope="module")
def trained():
    data = load_digits(seed=0)
    model = build_model(0)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    rng = np.random.default_rng(0)
    for _ in range(EPOCHS):
        order = rng.permutation(len(data.y_train))
        for first in range(0, len(order), BATCH_SIZE):
            rows = order[first:first + BATCH_SIZE]
            loss = nn.functional.cross_entropy(model(torch.from_numpy(data.x_train[rows])),
                                               torch.from_numpy(data.y_train[rows]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, data


def captured(model, x):
    """What the demo's hooks capture at CAM_LAYER for the predicted classes' scores."""
    kept = {}
    layer = model[CAM_LAYER]
    handles = [layer.register_forward_hook(lambda m, i, out: kept.update(a=out.detach())),
               layer.register_full_backward_hook(lambda m, gi, go: kept.update(g=go[0]))]
    logits = model(torch.from_numpy(x))
    predicted = logits.detach().numpy().argmax(1)
    one_hot = np.eye(logits.shape[1], dtype=np.float32)[predicted]
    (logits * torch.from_numpy(one_hot)).sum().backward()
    for handle in handles:
        handle.remove()
    return kept["a"].numpy(), kept["g"].numpy(), predicted


def test_the_heat_lies_mostly_on_the_digit_for_most_test_digits(trained):
    model, data = trained
    activations, gradients, predicted = captured(model, data.x_test)
    assert np.mean(predicted == data.y_test) > 0.9  # a model worth explaining
    maps = hires_cam(activations, gradients)
    assert maps.shape == (len(data.y_test), 8, 8) and maps.max(axis=(1, 2)).min() == 1.0
    share = heat_on_ink(upsample(maps, 28), upsample(data.x_test[:, 0], 28))
    assert np.mean(share > 0.5) > 0.8, np.percentile(share, [10, 50, 90])
    # Grad-CAM's mean gradient per channel does not suit this head: most maps are not
    # mostly on the digit (many are blank), which is why the demo keeps it per position
    pooled = heat_on_ink(upsample(grad_cam(activations, gradients), 28),
                         upsample(data.x_test[:, 0], 28))
    assert np.mean(pooled > 0.5) < 0.5


def test_heat_on_ink_is_the_share_of_each_maps_heat_on_inked_pixels():
    images = np.zeros((3, 2, 2))
    images[:, 0, 0] = 1.0
    maps = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], np.zeros((2, 2))])
    assert heat_on_ink(maps, images).tolist() == [1.0, 0.25, 0.0]


def test_upsampling_is_bilinear_with_pixel_centres_aligned():
    maps = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    wide = upsample(maps, 28)
    assert wide.shape == (2, 28, 28)
    real_torch = pytest.importorskip("torch")
    want = real_torch.nn.functional.interpolate(real_torch.from_numpy(maps)[:, None],
                                                size=(28, 28), mode="bilinear",
                                                align_corners=False)[:, 0].numpy()
    np.testing.assert_allclose(wide, want, rtol=1e-6, atol=1e-6)
