import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer

_ES = [
    "el",
    "la",
    "los",
    "de",
    "y",
    "en",
    "que",
    "dios",
    "tierra",
    "cielo",
    "luz",
    "agua",
    "dijo",
    "hizo",
    "vio",
    "bueno",
    "día",
    "noche",
    "mar",
]
_EN = [
    "the",
    "of",
    "and",
    "in",
    "that",
    "god",
    "earth",
    "heaven",
    "light",
    "water",
    "said",
    "made",
    "saw",
    "good",
    "day",
    "night",
    "sea",
]


def _corpus(n=300, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = _ES if rng.random() < 0.5 else _EN
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        out.append(s.capitalize() + rng.choice([".", ",", ";", "?"]))
    return out


@pytest.fixture(scope="module")
def texts():
    return _corpus()


@pytest.fixture(scope="module")
def tok(texts):
    return Tokenizer.train(iter(texts), vocab_size=400, hard_vocab_limit=False)


def test_round_trip_on_training_texts(tok, texts):
    for t in texts[:100]:
        ids = tok.encode(t)
        assert ids and all(i > UNK_ID for i in ids)
        assert tok.decode(ids) == t
    assert [tok.decode(ids) for ids in tok.encode_batch(texts[:20])] == texts[:20]


def test_unseen_characters_round_trip_with_byte_fallback(tok):
    t = "Dios dijo: ¡Ñandú! אֱלֹהִים"
    assert UNK_ID not in tok.encode(t)
    assert tok.decode(tok.encode(t)) == t


def test_special_ids(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    ids = tok.encode("la luz")
    assert tok.encode("la luz", add_bos=True, add_eos=True) == [BOS_ID, *ids, EOS_ID]
    assert tok.decode([BOS_ID, *ids, EOS_ID, *ids, PAD_ID]) == "la luz"  # stops at eos
    assert tok.decode([PAD_ID, BOS_ID, *ids, PAD_ID]) == "la luz"
    assert "".join(tok.pieces("la luz")).replace("▁", " ").strip() == "la luz"
    with pytest.raises(ValueError, match="ids"):
        tok.decode([tok.vocab_size + 5])


def test_piece_scores_rank_frequent_pieces_above_rare_ones(tok, texts):
    """A piece's score (its unigram log-probability) is higher for a piece the training texts use more; byte
    pieces score -inf, the rarest (what ``attnkit heads --roles`` reads as rarity)."""
    import math
    from collections import Counter

    scores = tok.piece_scores()
    assert len(scores) == tok.vocab_size
    assert all(scores[i] == -math.inf for i in range(tok.vocab_size) if tok.id_to_piece(i).startswith("<0x"))
    counts = Counter(i for t in texts for i in tok.encode(t))
    (common, _), *_ = counts.most_common()
    rare = min((i for i in counts if math.isfinite(scores[i]) and i > 3), key=lambda i: counts[i])
    assert scores[common] > scores[rare]


def test_save_load_and_bytes(tok, tmp_path):
    path = tok.save(tmp_path / "ckpt")
    assert path.name == "tokenizer.model"
    for other in (Tokenizer.load(tmp_path / "ckpt"), Tokenizer.from_bytes(tok.to_bytes())):
        assert other.vocab_size == tok.vocab_size
        assert other.encode("dijo dios") == tok.encode("dijo dios")
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.model"):
        Tokenizer.load(tmp_path / "empty")
    with pytest.raises(ValueError, match="model_proto"):
        Tokenizer.from_bytes(b"not a model")


def test_training_is_deterministic(texts, tmp_path):
    a = Tokenizer.train(texts, tmp_path / "a", vocab_size=400, hard_vocab_limit=False)
    b = Tokenizer.train(list(texts), vocab_size=400, hard_vocab_limit=False)
    assert a.to_bytes() == b.to_bytes()
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() == a.to_bytes()


def test_bpe(texts):
    bpe = Tokenizer.train(texts, vocab_size=400, model_type="bpe", hard_vocab_limit=False)
    assert bpe.decode(bpe.encode(texts[0])) == texts[0]


def test_bad_arguments(texts):
    with pytest.raises(ValueError, match="model_type"):
        Tokenizer.train(texts, model_type="wordpiece")
    with pytest.raises(TypeError, match="texts"):
        Tokenizer.train("just one string")
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train(texts, vocab_size=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_ES + _EN), min_size=1, max_size=15))
def test_round_trip_property(tok, words):
    text = " ".join(words)
    assert tok.decode(tok.encode(text)) == text
