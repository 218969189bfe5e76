"""The normalising rules both the matcher's index and its queries go through (triage/core/text.py)."""

from __future__ import annotations

import time

import pytest

from triage.core.text import Normalizer, collective_of, foreign_share, raw_words, stem

VOCABULARY = {
    "hang": ["hangs", "stuck", "frozen", "froze", "wait forever", "do not exit"],
    "epochend": ["end of epoch", "last batch"],
}


@pytest.fixture(scope="module")
def normalizer() -> Normalizer:
    return Normalizer(VOCABULARY)


@pytest.mark.parametrize(
    "spelling", ["all_reduce", "allreduce", "AllReduce", "ALLREDUCE", "all-reduce", "all reduce"]
)
def test_one_lexicon_for_collective_names(normalizer: Normalizer, spelling: str) -> None:
    assert set(normalizer.tokens(f"stuck in {spelling}")) == {"hang", stem("allreduce")}


def test_collective_of_names_the_operation_a_frame_is_in() -> None:
    assert collective_of("all_gather_into_tensor") == "allgather"
    assert collective_of("ncclAllReduce") == "allreduce"
    assert collective_of("monitored_barrier") == "barrier"
    assert collective_of("backward") is None


def test_vocabulary_applies_after_stemming(normalizer: Normalizer) -> None:
    # "stucks" is no variant, but its stem is the stem of one.
    assert normalizer.tokens("it stucks") == ["hang"]
    assert normalizer.tokens("Hanging") == normalizer.tokens("hangs") == ["hang"]


def test_phrase_variants_match_within_a_window(normalizer: Normalizer) -> None:
    assert normalizer.tokens("end of the first epoch") == ["epochend", "first"]
    assert normalizer.tokens("the end of a long and boring day for the epoch") != ["epochend"]


def test_variants_may_use_stopwords_and_negation(normalizer: Normalizer) -> None:
    assert normalizer.tokens("the workers do not exit") == ["worker", "hang"]
    assert "hang" not in normalizer.tokens("the workers exit")


def test_identifiers_split_into_words_and_keep_their_joined_form() -> None:
    assert raw_words("ProcessGroupNCCL find_unused_parameters GPUs fine-tuning") == [
        *("process", "group", "nccl", "processgroupnccl"),
        *("find", "unused", "parameters", "findunusedparameters"),
        "gpus",
        *("fine", "tuning", "finetuning"),
    ]


def test_a_brand_spelt_with_a_two_letter_hump_stays_one_word() -> None:
    assert raw_words("PyTorch ZeRO-3 LoRA") == ["pytorch", "zero", "3", "zero3", "lora"]
    assert raw_words("DeepSpeed") == ["deep", "speed", "deepspeed"]


def test_a_number_with_its_unit_glued_on_is_a_number(normalizer: Normalizer) -> None:
    assert normalizer.tokens("a 13B model on a 24GB card, 500ms a step on 8x A100") == [
        "model",
        "card",
        "step",
    ]


def test_a_number_spelt_out_is_a_number_but_zero_and_ordinals_are_words(normalizer: Normalizer) -> None:
    tokens = normalizer.tokens("hangs after a few hundred steps on eight GPUs")
    assert "hundr" not in tokens and "hundred" not in tokens and "eight" not in tokens
    assert "step" in tokens
    assert "zero" in normalizer.tokens("ZeRO stage two")
    assert "second" in normalizer.tokens("the second node")


def test_numbers_hex_urls_and_source_paths_are_dropped(normalizer: Normalizer) -> None:
    text = (
        "see https://example.com/a/b 4260/4435 0xdeadbeef 3f2a9c1b7 v100 "
        'File "/opt/conda/lib/python3.8/site-packages/torch/distributed/run.py", line 762, in main '
        "ProcessGroupNCCL.cpp:1169 train.py"
    )
    assert normalizer.tokens(text) == ["main"]


def test_other_scripts_are_kept_as_words_of_their_own() -> None:
    assert foreign_share("训练 卡住 NCCL timeout") == 0.5
    assert foreign_share("NCCL timeout") == 0.0
    assert "müssen" not in raw_words("Die Prozesse müssen warten")  # accents folded
    assert "mussen" in raw_words("Die Prozesse müssen warten")


def test_text_without_spaces_is_read_as_character_pairs_that_vocabulary_variants_meet() -> None:
    normalizer = Normalizer({"hang": ["卡住", "フリーズ"], "multigpu": ["多卡"], "multinode": ["多机"]})
    # the pairs are no terms of their own: only a variant turns them into one
    assert normalizer.tokens("训练过程中出现问题") == []
    assert normalizer.tokens("多机多卡训练卡住了 NCCL") == ["multinod", "multigpu", "hang", "nccl"]
    assert normalizer.tokens("学習がフリーズする") == ["hang"]
    # a variant uses its last character: the pair that starts on it (卡住 after 多卡) is no word
    assert normalizer.tokens("单机多卡住") == ["multigpu"]
    assert normalizer.tokens("训练log打印") == ["log"]  # a Latin run glued to Chinese is a word


def test_a_huge_line_is_normalised_in_linear_time(normalizer: Normalizer) -> None:
    line = "a.b/" * 200_000 + "x" * 100_000
    start = time.perf_counter()
    normalizer.tokens(line)
    assert time.perf_counter() - start < 5
