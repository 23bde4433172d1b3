"""zoo:minilm: the real all-MiniLM-L6-v2, equal to sentence-transformers, and its fidelity metric."""

from __future__ import annotations

import pytest
import torch

from dlperf.errors import WorkloadError
from dlperf.workload import load_workload
from dlperf.workload.zoo import minilm

pytestmark = pytest.mark.integration

SEQ_LEN = 32  # the eval set at a short length keeps the tests fast; the longest sentence is cut, which is fine


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return minilm.build("sdpa")


def test_embeddings_are_unit_norm_and_shaped(model: torch.nn.Module) -> None:
    w = load_workload("zoo:minilm?seq_len=64")
    ids, mask = w.example_inputs(5)
    assert ids.shape == mask.shape == (5, 64) and ids.dtype == mask.dtype == torch.int64
    out = w.check(model, (ids, mask))
    assert out.shape == (5, minilm.EMBEDDING_DIM)
    assert torch.allclose(out.norm(dim=1), torch.ones(5), atol=1e-5)
    assert w.kind == "transformer"
    assert tuple(w.input_names) == ("input_ids", "attention_mask") and tuple(w.output_names) == ("embedding",)
    assert w.source == "zoo:minilm?seq_len=64"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_matches_sentence_transformers(model: torch.nn.Module) -> None:
    from sentence_transformers import SentenceTransformer

    sentences = list(minilm.EVAL_SENTENCES[:12])
    reference = SentenceTransformer(str(minilm.model_dir()), device="cpu", local_files_only=True)
    expected = reference.encode(sentences, convert_to_tensor=True, batch_size=12)
    with torch.inference_mode():
        got = model(*minilm.tokenize(sentences, 128))
    assert got.shape == expected.shape
    assert torch.allclose(got, expected.cpu(), atol=2e-5)


def test_fidelity_of_the_model_is_one_and_a_perturbed_one_is_lower(model: torch.nn.Module) -> None:
    w = minilm.workload(seq_len=SEQ_LEN)
    assert w.eval is not None and w.eval.metric_name == "fidelity" and w.eval.higher_is_better
    assert w.eval.evaluate(model) > 0.9999
    noise = torch.Generator().manual_seed(0)

    def perturbed(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model(ids, mask) + 0.03 * torch.randn(ids.shape[0], minilm.EMBEDDING_DIM, generator=noise)

    degraded = w.eval.evaluate(perturbed)
    assert 0.5 < degraded < 0.99
    worst = minilm.min_fidelity(model, SEQ_LEN)
    assert 0.9999 < worst <= 1.0 + 1e-6


def test_eager_attention_gives_the_same_embeddings(model: torch.nn.Module) -> None:
    eager = load_workload("zoo:minilm?attn=eager&seq_len=32")
    assert eager.name == "minilm?seq_len=32&attn=eager"
    inputs = eager.example_inputs(4)
    with torch.inference_mode():
        a, b = eager.build_model()(*inputs), model(*inputs)
    assert torch.nn.functional.cosine_similarity(a, b).min() > 0.99999


def test_calibration_set_differs_from_the_eval_set() -> None:
    assert len(minilm.EVAL_SENTENCES) >= 64 and len(minilm.CALIBRATION_SENTENCES) >= 128
    assert not set(minilm.EVAL_SENTENCES) & set(minilm.CALIBRATION_SENTENCES)
    # keep_fp32="auto" chooses on the selection split: calibration sentences, never the eval ones
    assert len(minilm.SELECTION_SENTENCES) == 64
    assert set(minilm.SELECTION_SENTENCES) <= set(minilm.CALIBRATION_SENTENCES)
    w = minilm.workload(seq_len=SEQ_LEN)
    assert w.eval is not None and w.eval.calibration_inputs is not None and w.eval.selection_evaluate is not None
    batches = list(w.eval.calibration_inputs())
    assert sum(ids.shape[0] for ids, _ in batches) == len(minilm.CALIBRATION_SENTENCES)
    assert all(ids.shape[1] == mask.shape[1] == SEQ_LEN for ids, mask in batches)
    # Real sentences of varied lengths: the attention masks do not all cover the same number of tokens.
    lengths = torch.cat([mask.sum(dim=1) for _, mask in batches])
    assert lengths.min() < 8 and int(lengths.max()) == SEQ_LEN


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zoo:minilm?attn=flash", "attn='flash' is unknown: choose one of sdpa, eager"),
        ("zoo:minilm?seq_len=0", "seq_len=0 is out of range"),
        ("zoo:minilm?seq_len=1024", "seq_len=1024 is out of range"),
        ("zoo:minilm?seq_len=long", "seq_len='long' is not an integer: give an integer from 2 to 512"),
        ("zoo:minilm?seq_len=2.5", "seq_len=2.5 is not an integer: give an integer from 2 to 512"),
    ],
)
def test_bad_options_are_explained(spec: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_workload(spec)


def test_the_model_pickles(model: torch.nn.Module) -> None:
    import io

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    inputs = minilm.make_inputs(2, SEQ_LEN)
    with torch.inference_mode():
        assert torch.equal(restored(*inputs), model(*inputs))


def test_loading_it_leaves_the_hub_on_and_touches_no_network() -> None:
    """It set HF_HUB_OFFLINE=1 in the process, which turned the hub off for the user's own from_pretrained calls."""
    import os
    import subprocess
    import sys

    script = (
        "import os, socket\n"
        "def refuse(self, address):\n"
        "    raise OSError(f'network use: {address}')\n"
        "socket.socket.connect = refuse\n"
        "from dlperf.workload import load_workload\n"
        "w = load_workload('zoo:minilm?seq_len=8')\n"
        "w.check(w.build_model(), w.example_inputs(2))\n"
        "print('HF_HUB_OFFLINE' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
