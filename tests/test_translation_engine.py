"""The translator protocol: the PyTorch translator, the CTranslate2 engine and its explorer adapter each
declare :class:`attnkit.tasks.engine.TranslationEngine`, and on one tiny model they give results of
one shape: text, subword ids, a float score, and with ``return_attention`` a ``(T_out, S_in)`` map over
the pieces read; the float32 export's tokens equal PyTorch's greedy ones (the independent reference)."""

import numpy as np
import pytest
import torch

from attnkit.deploy.ct2_engine import ct2_available
from attnkit.tasks.engine import TranslationEngine
from test_ct2 import _tiny  # a random tiny Transformer with the shipped tokenizer, saved as a checkpoint

SENTENCES = ["Jesús lloró.", "En el principio creó Dios los cielos y la tierra."]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from attnkit.tasks.translation import Translator

    tmp = tmp_path_factory.mktemp("engine")
    ckpt = _tiny(tmp, "m")
    ours = Translator.load(ckpt)
    ours.max_len = 12  # random weights rarely stop: every engine is cut at the same length
    out = {"pytorch": ours}
    if ct2_available() is None:
        from attnkit.deploy.ct2_engine import CT2Translator
        from attnkit.deploy.ct2_explorer import CT2ExplorerTranslator
        from attnkit.deploy.ct2_export import export_ctranslate2

        ct2 = CT2Translator.load(export_ctranslate2(ckpt, tmp / "ct2", quantization="float32"), device="cpu")
        ct2.max_len = 12
        out |= {"ctranslate2": ct2, "explorer": CT2ExplorerTranslator(ct2)}
    return out


def test_each_engine_is_a_translation_engine(engines):
    for name, engine in engines.items():
        assert isinstance(engine, TranslationEngine), name
        assert TranslationEngine in type(engine).__mro__, f"{name} does not declare the protocol"
        assert engine.spelling == "rv1909"  # the tiny model's config: the built-in Bible, from Spanish


def test_a_partial_engine_is_not_one():
    class OnlyTranslate:
        def translate(self, sentences, **options):
            return []

    assert not isinstance(OnlyTranslate(), TranslationEngine)


def test_the_engines_give_results_of_one_shape(engines):
    ref = engines["pytorch"]
    ids = ref.encode_sources(SENTENCES)
    expected = [r.tokens for r in ref.translate(SENTENCES, beam_size=1)]
    for name, engine in engines.items():
        assert engine.encode_sources(SENTENCES) == ids, name
        results = engine.translate(SENTENCES, beam_size=1, return_attention=True)
        assert len(results) == len(SENTENCES), name
        for r, src, src_ids, tokens in zip(results, SENTENCES, ids, expected):
            assert r.source == src and isinstance(r.translation, str), name
            assert r.tokens == tokens, name  # the float32 export decodes as PyTorch's greedy search
            assert all(isinstance(t, int) for t in r.tokens) and isinstance(r.score, float), name
            attention = r.attention.numpy() if isinstance(r.attention, torch.Tensor) else np.asarray(r.attention)
            assert attention.shape == (len(r.tokens), len(src_ids)), name  # (T_out, S_in)
            assert np.allclose(attention.sum(-1), 1.0, atol=1e-4), name  # each row a distribution
            assert len(r.source_pieces) == len(src_ids) and len(r.target_pieces) == len(r.tokens), name
