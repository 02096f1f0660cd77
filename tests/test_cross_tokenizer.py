"""Classic drafts with another tokenizer: the vocabulary map, universal assisted generation at
T = 0 and token-level intersection at T > 0, on tiny random models with two word tokenizers
(the draft's ids a permutation of the target's, some words in two pieces, some words the
target lacks), and on Gemma 3 270M with SmolLM2-135M both ways (slow)."""

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE, WordLevel, WordPiece
from tokenizers.trainers import BpeTrainer
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished
from specdec_core.decoding.sampling import probs
from specdec_core.drafters import cross_tokenizer
from specdec_core.drafters.classic import ClassicDrafter, tokenizers_match
from specdec_core.drafters.cross_tokenizer import (
    Algorithm,
    CrossTokenizerDrafter,
    DraftContext,
    DraftModel,
    build_classic,
    draft_algorithm,
    draft_pairing,
    target_continuation,
)
from specdec_core.drafters.vocabulary_map import build_vocabulary_map, token_texts
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.tiny import VOCAB, prompt, tiny_loaded, tiny_model

WORDS = [f"w{i}" for i in range(VOCAB - 3)]  # the target's words, ids 3..31
SPLIT = {"w5": ("w", "##5"), "w12": ("w1", "##2"), "w20": ("w2", "##0")}  # two draft pieces
EXTRA = ("w29", "w30")  # draft words the target lacks
# where the draft's rows for its pieces and extra words come from (target words)
BORROWED = {"w": "w5", "##5": "w5", "##2": "w12", "##0": "w20", "w29": "w7", "w30": "w9"}


def draft_vocabulary() -> list[str]:
    """Specials in another order, the shared words permuted, then pieces and extra words."""
    shared = [w for w in WORDS if w not in SPLIT]
    order = torch.randperm(len(shared), generator=torch.Generator().manual_seed(3)).tolist()
    pieces = ["w", "##5", "##2", "##0"]
    return ["<s>", "</s>", "<unk>", *(shared[i] for i in order), *pieces, *EXTRA]


def draft_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(draft_vocabulary())}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="<unk>", continuing_subword_prefix="##"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def draft_model(target: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """The target's weights with its embedding and lm_head rows moved to the draft's ids
    (pieces and extra words take a target word's rows), plus relative Gaussian noise."""
    target_ids = {w: 3 + i for i, w in enumerate(WORDS)} | {"<unk>": 0, "<s>": 1, "</s>": 2}
    rows = [target_ids[BORROWED.get(token, token)] for token in draft_vocabulary()]
    config = target.config.__class__(**{**target.config.to_dict(), "vocab_size": len(rows)})
    model = LlamaForCausalLM(config).eval()
    state = target.state_dict()
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[name] = state[name][rows]
    model.load_state_dict(state)
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * noise * param.std().clamp(min=1e-3))
    model.generation_config.eos_token_id = 1
    return model


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(1, model=tiny_model(1, sharpness=8.0))


@pytest.fixture(scope="module")
def other(target):
    """A draft with another tokenizer that agrees with the target often."""
    return LoadedModel(
        model=draft_model(target.model, noise=0.15, seed=5),
        tokenizer=draft_tokenizer(),
        spec="tiny-other",
        source="memory",
        device=torch.device("cpu"),
        dtype=torch.float32,
    )


def drafter(target, other, greedy=Algorithm.UAG) -> CrossTokenizerDrafter:
    return CrossTokenizerDrafter(
        other.model, other.tokenizer, target.tokenizer, target.vocab_size, greedy=greedy
    )


def _generate(target, drafter_, ids, config):
    events = list(generate(target, drafter_, ids, config))
    assert isinstance(events[-1], Finished)
    return events[-1].summary


# --- the vocabulary map ----------------------------------------------------------------------


def test_shared_words_map_to_the_target_id_of_the_same_word(target, other):
    vocabulary = build_vocabulary_map(target.tokenizer, other.tokenizer, VOCAB, 35)
    target_vocab = target.tokenizer.get_vocab()
    for draft_id, token in enumerate(draft_vocabulary()):
        expected = target_vocab[token] if token in WORDS and token not in SPLIT else -1
        assert vocabulary.target_id(draft_id) == expected, token
    assert vocabulary.size == len(WORDS) - len(SPLIT)
    q = torch.rand(2, 35)
    q = q * vocabulary.shared  # zero outside the shared ids
    mapped = vocabulary.to_target(q)
    assert mapped.shape == (2, VOCAB)
    torch.testing.assert_close(mapped.sum(-1), q.sum(-1))
    draft_id = draft_vocabulary().index("w7")
    torch.testing.assert_close(mapped[:, target_vocab["w7"]], q[:, draft_id])


def _word_tokenizer(tokens, pre_tokenizer, decoder) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizer
    if decoder is not None:
        tokenizer.decoder = decoder
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


def test_sentencepiece_and_byte_level_space_markers_compare_as_spaces():
    metaspace = _word_tokenizer(
        ["<unk>", "▁hello", "hello", "▁world", "!", "▁a", "▁"],
        pre_tokenizers.Metaspace(),  # prepends '▁' (a Llama-style tokenizer)
        decoders.Metaspace(),  # ... and strips it from the first token when decoding
    )
    byte_level = _word_tokenizer(
        ["<unk>", "!", "hello", "Ġworld", "Ã", "Ġhello", "a", "Ġ"],
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        decoders.ByteLevel(),
    )
    assert token_texts(byte_level)[4] is None  # 'Ã' is the byte 0xC3: half a character
    texts = token_texts(metaspace)
    assert texts[1] == " hello" and texts[2] == "hello" and texts[0] is None
    vocabulary = build_vocabulary_map(metaspace, byte_level, len(metaspace), len(byte_level))
    got = {t: vocabulary.target_id(i) for t, i in byte_level.get_vocab().items()}
    assert got == {"<unk>": -1, "!": 4, "hello": 2, "Ġworld": 3, "Ã": -1, "Ġhello": 1, "a": -1,
                   "Ġ": 6}  # fmt: skip
    back = build_vocabulary_map(byte_level, metaspace, len(byte_level), len(metaspace))
    assert back.target_id(1) == 5 and back.target_id(3) == 3 and back.target_id(5) == -1


def test_the_choice_rule_names_the_algorithm(target, other):
    assert tokenizers_match(target.tokenizer, tiny_loaded(2).tokenizer)
    assert not tokenizers_match(target.tokenizer, other.tokenizer)
    assert draft_algorithm(target.tokenizer, target.tokenizer, 0.0) == "same tokenizer"
    assert draft_algorithm(target.tokenizer, other.tokenizer, 0.0) == Algorithm.UAG.value
    assert draft_algorithm(target.tokenizer, other.tokenizer, 0.7) == Algorithm.TLI.value
    assert isinstance(build_classic(target, tiny_loaded(2)), ClassicDrafter)
    assert isinstance(build_classic(target, other), CrossTokenizerDrafter)


def test_the_window_says_how_a_draft_drafts_when_it_loads(target, other, monkeypatch):
    from app.engine import SpecdecEngine
    from specdec_core.run import runner

    drafts = {"same": tiny_loaded(2), "other": other}
    monkeypatch.setitem(runner.EXTRA_LOADERS, "draft", lambda spec, _t, progress: drafts[spec])
    engine = SpecdecEngine(target)
    lines: list[str] = []
    for spec, words in (("same", "same tokenizer"), ("other", "universal assisted generation")):
        engine.extra("classic", {"draft": spec}, lambda line, _f: lines.append(line))
        assert lines[-1].startswith(f"loaded draft '{spec}' (") and words in lines[-1]
    assert "token-level intersection at T > 0" in draft_pairing(target.tokenizer, other.tokenizer)


# --- re-tokenization ---------------------------------------------------------------------------


def test_the_draft_context_is_the_drafts_tokenization_of_the_committed_text(target, other):
    ids = prompt(length=5)
    context = DraftContext(target.tokenizer, other.tokenizer)
    context.begin(ids)
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):  # commit two or three words at a time, past the frozen boundary
        ids = ids + torch.randint(3, VOCAB, (3,), generator=generator).tolist()
        draft_ids = context.ids(ids)
        text = target.tokenizer.decode(ids, skip_special_tokens=True)
        assert draft_ids == other.tokenizer(text)["input_ids"]
    assert len(context.frozen) > 0  # old tokens were frozen, not re-written


@pytest.fixture(scope="module")
def byte_bpe() -> PreTrainedTokenizerFast:
    """A byte-level BPE learned on a few sentences: words in pieces, spaces as 'Ġ'."""
    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = ["hello world, the helpful helper held the yellow shell"] * 20 + ["héllo"]
    trainer = BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<unk>"],
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


def test_the_draft_cache_is_kept_for_the_common_prefix_and_the_rest_fed(other):
    model = DraftModel(other.model, len(other.tokenizer))
    model.logits_after([0, 5, 6, 7, 8, 9])
    model.feed([10, 11])  # drafted tokens, then a context that shares only [0, 5, 6]
    context = [0, 5, 6, 12, 13]
    logits = model.logits_after(context)
    assert model.fed == context
    fresh = other.model(torch.tensor([context])).logits[0, -1]
    torch.testing.assert_close(logits, fresh, atol=1e-5, rtol=1e-4)
    again = model.logits_after(context)  # nothing new: the last id is fed again
    torch.testing.assert_close(again, fresh, atol=1e-5, rtol=1e-4)


def test_a_draft_sharing_no_token_with_the_target_is_refused(target):
    foreign = _word_tokenizer(["<unk>", "x1", "x2"], pre_tokenizers.WhitespaceSplit(), None)
    with pytest.raises(SpecdecError, match="share no token"):
        CrossTokenizerDrafter(tiny_model(2), foreign, target.tokenizer, target.vocab_size)


SENTENCE = "the helpful helper held the yellow shell, hello world"


def test_new_text_is_written_as_the_target_writes_it_after_the_committed_ids(byte_bpe):
    """Cut the sentence anywhere: where the committed ids are the start of the sentence's
    ids, the continuation is the rest of them; where the rest of the text merges into the
    last committed token ("the he" + "llo"), the continuation decodes back to the text."""
    whole = byte_bpe(SENTENCE)["input_ids"]
    merged = 0
    for cut in range(1, len(SENTENCE)):
        committed = byte_bpe(SENTENCE[:cut])["input_ids"]
        got = target_continuation(byte_bpe, committed, SENTENCE[cut:])
        if whole[: len(committed)] == committed:
            assert committed + got == whole, SENTENCE[:cut]
        else:
            merged += 1
            assert byte_bpe.decode(committed + got) == SENTENCE, SENTENCE[:cut]
    assert merged > 5


# --- T = 0: exactly the target's greedy output ---------------------------------------------------


@pytest.mark.parametrize("greedy", [Algorithm.UAG, Algorithm.TLI])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_output_equals_target_greedy(target, other, greedy, k, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference = run(target, "ar", ids, config)
    summary = _generate(target, drafter(target, other, greedy), ids, config)
    assert summary.token_ids == reference.token_ids
    assert summary.steps < reference.steps  # drafts were accepted
    assert summary.config["draft_algorithm"].startswith(
        "universal" if greedy is Algorithm.UAG else "token-level intersection (T = 0)"
    )


def test_the_step_splits_into_draft_forwards_and_retokenization(target, other):
    summary = _generate(target, drafter(target, other), prompt(), DecodeConfig(max_new_tokens=12))
    assert set(summary.phases.draft_parts) == {"forwards", "retokenize"}
    assert all(seconds > 0 for seconds in summary.phases.draft_parts.values())


# --- T > 0: exactly the target's distribution ----------------------------------------------------

SAMPLED = prompt(length=4)


def _first_two(target, drafter_, temperature, top_p, samples):
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=temperature, top_p=top_p)
    return sample_first_two_tokens(target, drafter_, SAMPLED, config, samples=samples, seed=7)


@pytest.mark.parametrize(
    "temperature, top_p, samples",
    [(1.0, 1.0, 400), pytest.param(0.7, 0.9, 2500, marks=pytest.mark.slow)],
)
def test_sampled_tokens_follow_target_distribution(target, other, temperature, top_p, samples):
    firsts, seconds, accepted = _first_two(
        target, drafter(target, other), temperature, top_p, samples
    )
    first, second = target_marginals(target.model, SAMPLED, temperature, top_p)
    assert accepted > samples // 4, "the test must exercise accepted drafts"
    assert chi_square_pvalue(firsts, first) > 0.001
    assert chi_square_pvalue(seconds, second) > 0.001


def _not_renormalised(logits, shared, temperature, top_p):
    """A wrong rule: the draft's distribution over all its ids, cut to the shared ones and not
    renormalised; the draft still samples the renormalised one (`sample` normalises)."""
    return probs(logits, temperature, top_p) * shared


def test_the_sampling_test_detects_a_draft_distribution_not_renormalised(
    target, other, monkeypatch
):
    monkeypatch.setattr(cross_tokenizer, "intersection_distribution", _not_renormalised)
    firsts, seconds, _ = _first_two(target, drafter(target, other), 1.0, 1.0, 400)
    monkeypatch.undo()
    first, second = target_marginals(target.model, SAMPLED, 1.0, 1.0)
    with pytest.raises(AssertionError):
        assert chi_square_pvalue(firsts, first) > 0.001
        assert chi_square_pvalue(seconds, second) > 0.001


# --- the real pair: Gemma 3 270M and SmolLM2-135M ------------------------------------------------

MIXED10 = Path(__file__).parent.parent / "docs" / "bench" / "mixed10.jsonl"


def _mixed10(count: int) -> list[str]:
    lines = MIXED10.read_text().splitlines()[:count]
    return [json.loads(line)["turns"][0] for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["gemma-drafted-by-smollm2", "smollm2-drafted-by-gemma"])
def test_real_pair_equals_ar_both_ways(gemma, embedded, direction):
    from specdec_core.run.prompts import encode_prompt

    target, draft = (gemma, embedded) if direction.startswith("gemma") else (embedded, gemma)
    vocabulary = build_vocabulary_map(
        target.tokenizer, draft.tokenizer, target.vocab_size, draft.vocab_size
    )
    space_the = draft.tokenizer(" the", add_special_tokens=False)["input_ids"]
    assert vocabulary.size > 20000 and len(space_the) == 1
    assert vocabulary.target_id(space_the[0]) == target.tokenizer(" the")["input_ids"][-1]
    drafter_ = build_classic(target, draft)
    config = DecodeConfig(max_new_tokens=48, k=4)
    accepted = 0
    for text in _mixed10(2):
        ids = encode_prompt(target.tokenizer, text)
        reference = run(target, "ar", ids, config)
        summary = _generate(target, drafter_, ids, config)
        assert summary.token_ids == reference.token_ids
        accepted += sum(summary.accepted_per_position)
    assert accepted > 0
