"""Text normalisation and the SentencePiece tokenizer whose ids are the model's ids."""

from __future__ import annotations

import pickle

import pytest
import sentencepiece as spm

from asr.text import NORMALIZERS, Tokenizer, TokenizerError, normalize

TEXTS = [
    "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES AND WE ARE GLAD TO WELCOME HIS GOSPEL",
    "NOR IS MISTER QUILTER'S MANNER LESS INTERESTING THAN HIS MATTER",
    "HE TELLS US THAT AT THIS FESTIVE SEASON OF THE YEAR WITH CHRISTMAS AND ROAST BEEF LOOMING BEFORE US",
    "SIMILES DRAWN FROM EATING AND ITS RESULTS OCCUR MOST READILY TO THE MIND",
    "HE HAS GRAVE DOUBTS WHETHER SIR FREDERICK LEIGHTON'S WORK IS REALLY GREEK AFTER ALL",
    "LINNELL'S PICTURES ARE A SORT OF UP GUARDS AND AT EM PAINTINGS",
    "AND MASON'S EXQUISITE IDYLLS ARE AS NATIONAL AS A JINGO POEM",
    "IT IS OBVIOUSLY UNNECESSARY FOR US TO POINT OUT HOW LUMINOUS THESE CRITICISMS ARE",
] * 4


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hello, world!", "HELLO WORLD"),
        ("  it's   a\tTEST\n", "IT'S A TEST"),
        ("don\u2019t stop", "DON'T STOP"),  # typographic apostrophe
        ("café déjà-vu", "CAFE DEJA VU"),  # accents stripped, hyphen splits
        ("the boys' books", "THE BOYS' BOOKS"),  # possessive plural keeps its apostrophe
        ("'em and 'tis", "'EM AND 'TIS"),
        ("a ' lone '' quote", "A LONE QUOTE"),  # apostrophes attached to no letter go
        ("In 1999, $5.", "IN"),  # digits are not spelled out (documented)
        ("", ""),
    ],
)
def test_normalize_librispeech(raw: str, expected: str) -> None:
    assert normalize(raw, "librispeech") == expected


def test_normalize_is_idempotent_on_librispeech_text() -> None:
    for t in TEXTS:
        assert normalize(t) == t


def test_normalize_none_and_unknown() -> None:
    assert normalize("  Hello,   World! ", "none") == "Hello, World!"
    assert set(NORMALIZERS) >= {"librispeech", "none"}
    with pytest.raises(ValueError, match="unknown text normaliser 'klingon'"):
        normalize("x", "klingon")


@pytest.mark.parametrize("model_type, vocab_size", [("unigram", 60), ("bpe", 60), ("char", None)])
def test_tokenizer_ids_are_model_ids(tmp_path, model_type: str, vocab_size: int | None) -> None:
    tok = Tokenizer.train(TEXTS, tmp_path, vocab_size, model_type)
    v = tok.vocab_size
    if vocab_size is not None:
        assert v == vocab_size
    assert (tmp_path / "tokenizer.model").is_file()
    assert tok.blank_id == tok.pad_id == 0 and tok.unk_id == 1 and tok.sos_id == tok.eos_id == v - 1
    vocab = tok.vocabulary()
    assert vocab[0] == "<blank>" and vocab[1] == "<unk>" and vocab[-1] == "<sos/eos>"
    assert len(set(vocab)) == v
    for t in TEXTS[:8]:
        ids = tok.encode(t)
        assert ids and all(2 <= i < v - 1 for i in ids), "encode must never emit blank, unk or sos/eos here"
        assert tok.decode(ids) == t
        # the decoder's specials and CTC blanks are dropped on the way back
        assert tok.decode([0, *ids, 0, v - 1]) == t
    # characters never seen map to <unk>
    assert tok.unk_id in tok.encode("QUILTER \u00c6")


def test_char_tokenizer_size(tmp_path) -> None:
    tok = Tokenizer.train(TEXTS, tmp_path, None, "char")
    chars = {c for t in TEXTS for c in t if c != " "}
    assert tok.vocab_size == len(chars) + 4  # + ▁ + <blank> <unk> <sos/eos>
    with pytest.raises(TokenizerError, match=f"exactly {tok.vocab_size} ids"):
        Tokenizer.train(TEXTS, tmp_path / "b", tok.vocab_size + 5, "char")
    assert Tokenizer.train(TEXTS, tmp_path / "c", tok.vocab_size, "char").vocab_size == tok.vocab_size


def test_vocab_too_large_names_the_limit(tmp_path) -> None:
    with pytest.raises(TokenizerError, match=r"too large .* use at most (\d+)") as e:
        Tokenizer.train(TEXTS, tmp_path, 5000, "unigram")
    limit = int(str(e.value).split("at most ")[1].split()[0])
    assert Tokenizer.train(TEXTS, tmp_path / "ok", limit, "unigram").vocab_size == limit
    with pytest.raises(TokenizerError, match="too large"):
        Tokenizer.train(TEXTS, tmp_path / "no", limit + 1, "unigram")


def test_train_rejects_bad_input(tmp_path) -> None:
    with pytest.raises(TokenizerError, match="no non-empty transcripts"):
        Tokenizer.train(["", "  "], tmp_path, 50, "unigram")
    with pytest.raises(TokenizerError, match="model_type"):
        Tokenizer.train(TEXTS, tmp_path, 50, "word")
    with pytest.raises(TokenizerError, match="vocab_size"):
        Tokenizer.train(TEXTS, tmp_path, None, "bpe")


def test_load_pickle_and_wrong_layout(tmp_path) -> None:
    tok = Tokenizer.train(TEXTS, tmp_path / "tok", 50, "bpe")
    for path in (tmp_path / "tok", tmp_path / "tok" / "tokenizer.model"):
        again = Tokenizer.load(path)
        assert again.vocabulary() == tok.vocabulary()
        assert again.encode(TEXTS[1]) == tok.encode(TEXTS[1])
    copy = pickle.loads(pickle.dumps(tok))  # DataLoader workers receive a pickled copy
    assert copy.encode(TEXTS[2]) == tok.encode(TEXTS[2])
    with pytest.raises(TokenizerError, match="no such tokenizer model"):
        Tokenizer.load(tmp_path / "missing")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path / "junk.model")
    # a SentencePiece model trained with spm's default specials (<unk> 0, <s> 1, </s> 2) is refused
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS), model_prefix=str(tmp_path / "plain"), vocab_size=50, minloglevel=2
    )
    with pytest.raises(TokenizerError, match="expected special pieces"):
        Tokenizer.load(tmp_path / "plain.model")
