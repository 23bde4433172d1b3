"""zoo:digits-cnn: trains from a seed into the cache, reloads from it, and scores a real held-out accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.errors import DlperfWarning
from dlperf.workload import load_workload
from dlperf.workload.zoo import digits_cnn

pytestmark = pytest.mark.integration


def test_trains_into_the_cache_and_is_accurate(zoo_cache_dir: Path) -> None:
    w = load_workload("zoo:digits-cnn")
    model = w.build_model()
    path = digits_cnn.weights_path()
    assert path.parent.parent == zoo_cache_dir
    assert path.exists()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert w.eval is not None and w.eval.metric_name == "accuracy" and w.eval.higher_is_better
    accuracy = w.eval.evaluate(model)
    assert 0.9 < accuracy <= 1.0


def test_second_load_reads_the_cached_file() -> None:
    digits_cnn.make_model()  # make sure the cache exists
    path = digits_cnn.weights_path()
    original = path.read_bytes()
    state = torch.load(path, weights_only=True)
    # A file whose last layer always votes for class 3: a model built from it must show that.
    last_bias = [k for k in state if k.endswith(".bias")][-1]
    state[last_bias] = torch.full_like(state[last_bias], -100.0)
    state[last_bias][3] = 100.0
    torch.save(state, path)
    try:
        model = digits_cnn.make_model()
        (x,) = digits_cnn.make_inputs(16)
        with torch.inference_mode():
            assert model(x).argmax(dim=1).tolist() == [3] * 16
    finally:
        path.write_bytes(original)
    rebuilt: Any = digits_cnn.make_model()
    assert torch.equal(rebuilt[0].weight, torch.load(path, weights_only=True)["0.weight"])


def test_a_cache_that_cannot_be_written_warns_and_the_weights_trained_are_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was a WorkloadError after the training: the model could not be built at all."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    trained: list[int] = []
    train = digits_cnn.train_weights

    def counted() -> dict[str, torch.Tensor]:
        trained.append(1)
        return train()

    monkeypatch.setattr(digits_cnn, "train_weights", counted)
    monkeypatch.setattr(digits_cnn, "_UNCACHED", {})
    with pytest.warns(DlperfWarning, match=r"cannot cache zoo:digits-cnn's trained weights at .* \(Not a directory\)"):
        model: Any = digits_cnn.make_model()
    again: Any = digits_cnn.make_model()  # the same process builds it again (optimize's candidates): not trained again
    assert trained == [1]
    assert torch.equal(again[0].weight, model[0].weight)
    assert 0.9 < digits_cnn.workload().eval.evaluate(model) <= 1.0  # type: ignore[union-attr]


def test_unreadable_cache_file_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "digits_cnn-v1.pt"
    bad.write_bytes(b"half a file")
    assert digits_cnn._read_cached(bad) is None
    assert digits_cnn._read_cached(tmp_path / "absent.pt") is None


def test_eval_takes_any_callable_and_counts_correct_answers() -> None:
    w = digits_cnn.workload()
    assert w.eval is not None
    labels = digits_cnn.data().test_y

    def always_zero(x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(x.shape[0], 10)
        logits[:, 0] = 1.0
        return logits

    assert w.eval.evaluate(always_zero) == pytest.approx(float((labels == 0).float().mean()))


def test_split_inputs_loader_and_calibration() -> None:
    d = digits_cnn.data()
    assert len(d.train_y) + len(d.test_y) == 1797
    assert len(d.test_y) == 359
    assert d.test_x.dtype == torch.float32 and float(d.test_x.min()) >= 0.0 and float(d.test_x.max()) <= 1.0
    w = digits_cnn.workload()
    assert w.kind == "cnn" and tuple(w.input_names) == ("image",)
    (x,) = w.example_inputs(400)  # more than the held-out split: repeated
    assert x.shape == (400, 1, 8, 8) and x.dtype == torch.float32
    assert torch.equal(x[359], x[0])
    assert w.eval is not None and w.eval.calibration_inputs is not None
    batches = list(w.eval.calibration_inputs())
    assert sum(b[0].shape[0] for b in batches) == len(d.train_y)
    assert torch.equal(batches[0][0], d.train_x[: batches[0][0].shape[0]])
    assert w.train is not None
    loader = w.train.make_loader(32, num_workers=0)
    images, labels = next(iter(loader))
    assert images.shape == (32, 1, 8, 8) and labels.dtype == torch.int64
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert len(loader) == len(d.train_y) // 32  # drop_last
    model = digits_cnn.build()
    loss = w.train.loss_fn(model(images), labels)
    assert loss.ndim == 0 and float(loss.detach()) > 0
    assert isinstance(w.train.make_optimizer(model.parameters()), torch.optim.Optimizer)


def test_the_selection_split_never_scores_a_test_image() -> None:
    """keep_fp32="auto" chooses its fp32 layers on `selection_evaluate`: train-split images, not the held-out test
    images `evaluate` (the metric the search judges by) scores."""
    d = digits_cnn.data()
    w = digits_cnn.workload()
    assert w.eval is not None and w.eval.selection_evaluate is not None
    seen: list[torch.Tensor] = []
    model = digits_cnn.make_model()

    def predict(x: torch.Tensor) -> Any:
        seen.append(x)
        return model(x)

    accuracy = w.eval.selection_evaluate(predict)
    rows = torch.cat(seen)
    assert rows.shape[0] == digits_cnn.SELECTION_ROWS and 0.9 < accuracy <= 1.0
    test_rows = {tuple(r.flatten().tolist()) for r in d.test_x}
    train_rows = {tuple(r.flatten().tolist()) for r in d.train_x}
    chose = {tuple(r.flatten().tolist()) for r in rows}
    assert chose <= train_rows and not chose & (test_rows - train_rows)
