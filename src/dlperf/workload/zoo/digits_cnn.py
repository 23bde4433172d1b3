"""`zoo:digits-cnn`: a small CNN trained on scikit-learn's bundled 8x8 digits, with a real accuracy metric.

The weights are trained once (seeded, a few seconds on a CPU) and cached under the user cache dir
(`DLPERF_CACHE_DIR` overrides it); the file is written to a temporary name and renamed, so a concurrent
process never reads half a file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf._cache import cache_dir, warn_not_cached
from dlperf._files import write_atomic
from dlperf.errors import MissingDependency
from dlperf.workload.base import EvalSpec, Inputs, Predict, TrainSpec, Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

SUMMARY = "small CNN on scikit-learn's 8x8 digits (10 classes), trained and cached on first use; accuracy"

WEIGHTS_VERSION = 1
"""Bumped when the architecture or the training recipe changes, so an old cached file is not reused."""

SPLIT_SEED = 0
TRAIN_SEED = 0
HELD_OUT_FRACTION = 0.2
TRAIN_EPOCHS = 8
TRAIN_BATCH_SIZE = 64
EVAL_BATCH_SIZE = 128
CALIBRATION_BATCH_SIZE = 64
SELECTION_ROWS = 360
"""Train-split images the selection split scores (as many as the test split holds)."""


def weights_path() -> Path:
    return cache_dir() / "zoo" / f"digits_cnn-v{WEIGHTS_VERSION}.pt"


def build() -> nn.Module:
    """The untrained architecture: two 3x3 convs, a 2x2 max-pool, two linear layers (about 40k params)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


@dataclass(frozen=True)
class DigitsData:
    """The digits split once with a fixed seed: images float32 [N, 1, 8, 8] in [0, 1], labels int64 [N]."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


@functools.lru_cache(maxsize=1)
def data() -> DigitsData:
    import torch

    try:
        from sklearn.datasets import load_digits  # the digits data set is bundled with scikit-learn
    except ImportError as exc:
        raise MissingDependency("scikit-learn", "zoo") from exc
    bunch = load_digits()
    with torch.inference_mode(False):  # cached for the process: never inference tensors
        return _split(torch.tensor(bunch.images, dtype=torch.float32), torch.tensor(bunch.target, dtype=torch.int64))


def _split(images: torch.Tensor, labels: torch.Tensor) -> DigitsData:
    import torch

    x = images.unsqueeze(1) / 16.0  # pixel values are 0..16
    y = labels
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_test = round(len(y) * HELD_OUT_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return DigitsData(x[train].contiguous(), y[train].contiguous(), x[test].contiguous(), y[test].contiguous())


def train_weights() -> dict[str, torch.Tensor]:
    """Train the CNN from a fixed seed on the train split; returns its state_dict."""
    import torch

    threads = torch.get_num_threads()
    # One thread: the ops are tiny, and on a busy machine extra threads spin-wait (7x slower measured).
    torch.set_num_threads(1)
    try:
        # make_model() may be called under no_grad or inference_mode; training needs autograd regardless.
        with torch.inference_mode(False), torch.enable_grad():
            with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG
                torch.manual_seed(TRAIN_SEED)
                model = build()
            _fit(model)
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _fit(model: nn.Module) -> None:
    import torch

    d = data()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(TRAIN_SEED)
    model.train()
    for _ in range(TRAIN_EPOCHS):
        order = torch.randperm(len(d.train_y), generator=g)
        for start in range(0, len(order), TRAIN_BATCH_SIZE):
            idx = order[start : start + TRAIN_BATCH_SIZE]
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(d.train_x[idx]), d.train_y[idx])
            loss.backward()
            optimizer.step()


def load_or_train_weights() -> dict[str, torch.Tensor]:
    """The cached state_dict, or train it and write the cache (atomically) when it is absent or unreadable."""
    path = weights_path()
    state = _read_cached(path) or _UNCACHED.get(path)
    if state is not None:
        return state
    state = train_weights()
    try:
        _save_atomic(state, path)
    except OSError as exc:  # the weights are trained; only the next process's shortcut is lost
        warn_not_cached("zoo:digits-cnn's trained weights", path, exc, "trains them")
        _UNCACHED[path] = state  # this process builds the model again (optimize's candidates) without training
    return state


_UNCACHED: dict[Path, dict[str, torch.Tensor]] = {}
"""Weights this process trained but could not cache, by the path they were meant for."""


def _read_cached(path: Path) -> dict[str, torch.Tensor] | None:
    """The cached state_dict, or None when there is none or it cannot be used (truncated, stale)."""
    import torch

    if not path.exists():
        return None
    try:
        state: dict[str, torch.Tensor] = torch.load(path, map_location="cpu", weights_only=True)
        build().load_state_dict(state)
    except Exception:
        return None
    return state


def _save_atomic(state: dict[str, torch.Tensor], path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: torch.save(state, f))


def make_model() -> nn.Module:
    model = build()
    model.load_state_dict(load_or_train_weights())
    return model.eval()


def evaluate(predict: Predict) -> float:
    """Held-out accuracy of `predict` (any callable taking a float32 [B, 1, 8, 8] tensor, returning logits)."""
    import torch

    d = data()
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(d.test_y), EVAL_BATCH_SIZE):
            logits = torch.as_tensor(predict(d.test_x[start : start + EVAL_BATCH_SIZE].clone()))
            correct += int((logits.argmax(dim=-1) == d.test_y[start : start + EVAL_BATCH_SIZE]).sum())
    return correct / len(d.test_y)


def selection_evaluate(predict: Predict) -> float:
    """Accuracy on the last SELECTION_ROWS images of the train split (the selection split: never the held-out test
    images `evaluate` scores), for passes that choose by the metric (`keep_fp32="auto"`)."""
    import torch

    d = data()
    x, y = d.train_x[-SELECTION_ROWS:], d.train_y[-SELECTION_ROWS:]
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(y), EVAL_BATCH_SIZE):
            logits = torch.as_tensor(predict(x[start : start + EVAL_BATCH_SIZE].clone()))
            correct += int((logits.argmax(dim=-1) == y[start : start + EVAL_BATCH_SIZE]).sum())
    return correct / len(y)


def calibration_inputs() -> Iterator[Inputs]:
    """Batches of train-split images, as model inputs, for passes that calibrate (static int8)."""
    d = data()
    for start in range(0, len(d.train_y), CALIBRATION_BATCH_SIZE):
        yield (d.train_x[start : start + CALIBRATION_BATCH_SIZE].clone(),)


def make_inputs(batch_size: int) -> Inputs:
    """Real held-out images, repeated when the batch is larger than the held-out split."""
    test_x = data().test_x
    reps = -(-batch_size // len(test_x))
    # A copy, never a view of the cached data set: callers may modify their inputs in place.
    x = test_x.repeat(reps, 1, 1, 1)[:batch_size] if reps > 1 else test_x[:batch_size]
    return (x.clone(),)


def make_loader(batch_size: int, **dataloader_kwargs: Any) -> Any:
    """A DataLoader of (images, labels) over the train split, shuffled with a fixed seed by default."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    d = data()
    kwargs: dict[str, Any] = {"shuffle": True, "drop_last": True}
    kwargs.update(dataloader_kwargs)
    if kwargs.get("shuffle") and "generator" not in kwargs and "sampler" not in kwargs:
        kwargs["generator"] = torch.Generator().manual_seed(TRAIN_SEED)
    return DataLoader(TensorDataset(d.train_x, d.train_y), batch_size=batch_size, **kwargs)


def workload() -> Workload:
    import torch

    return Workload(
        name="digits-cnn",
        make_model=make_model,
        make_inputs=make_inputs,
        eval=EvalSpec(
            evaluate=evaluate,
            metric_name="accuracy",
            higher_is_better=True,
            calibration_inputs=calibration_inputs,
            selection_evaluate=selection_evaluate,
        ),
        train=TrainSpec(
            make_loader=make_loader,
            loss_fn=torch.nn.functional.cross_entropy,
            make_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
            batch_size=64,
        ),
        description=SUMMARY,
        source="zoo:digits-cnn",
        kind="cnn",
        input_names=("image",),
        output_names=("logits",),
    )
