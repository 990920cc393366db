"""The inference wrapper: a trained translation model with its tokenizer, and its attention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...data.spelling import default_spelling
from ...data.text import check_unicode, no_readable_word
from ...data.tokenizer import MODEL_FILENAME, Tokenizer, encode_sources
from ...decoding import OutputLayerDecoder, search
from ...errors import InputError
from ...models.base import AttentionMaps
from ..engine import TranslationEngine
from ..results import ResultRecord
from ..wrapper import InferenceWrapper
from .generation import DEFAULT_LENGTH_PENALTY, GENERATION_FILE, check_length_penalty, read_generation_defaults
from .guided import guided_head
from .lexical_shortlist import DEFAULT_FREQUENT, DEFAULT_PER_SOURCE, LexicalShortlist, ShortlistError, tokenizer_digest


@dataclass
class TranslationAttention:
    """Every attention of a translation model for one sentence pair, with the pieces it is over.

    ``maps`` is the model's :class:`attnkit.models.AttentionMaps` with the batch dimension removed
    (CPU float32): e.g. ``maps.alignment (T, S)``, ``maps.cross (L, H, T, S)``. Row ``t`` belongs
    to ``target_pieces[t]``, column ``j`` to ``source_pieces[j]``.
    """

    source_pieces: list[str]
    target_pieces: list[str]
    maps: AttentionMaps
    #: ``(T, S)``: for a model trained with guided alignment, its guided head's rows as ``attnkit align``
    #: reads them (:func:`~attnkit.tasks.translation.guided.guided_head`: for a Transformer the row of the
    #: step whose *input* is each target piece, which the pass gets by forcing one step more); else None
    guided: torch.Tensor | None = None

    def word_alignment(self) -> tuple[list[str], list[str], torch.Tensor | None]:
        """``(source words, target words, word attention (T_words, S_words) or None)``: the
        alignment aggregated over pieces by :func:`attnkit.alignment.word_attention`."""
        from ...alignment import word_attention, words_from_pieces

        src, tgt = words_from_pieces(self.source_pieces), words_from_pieces(self.target_pieces)
        if self.maps.alignment is None:
            return src, tgt, None
        return src, tgt, word_attention(self.maps.alignment, self.source_pieces, self.target_pieces)

    def _repr_html_(self) -> str | None:  # Jupyter, VS Code, Colab: the explorer's view inline
        from ...display import html_for  # the explorer registers the view there

        return html_for(self)


@dataclass
class Translation(ResultRecord):
    """One translated sentence: the text, its subword ids and the search's score (log-probability,
    length-penalised under beam search); with ``return_attention``, the cross-attention
    ``attention (T_out, S_in)`` and the source and target subword pieces it is indexed by."""

    translation: str
    tokens: list[int]
    score: float
    source: str | None = None
    attention: torch.Tensor | None = None
    source_pieces: list[str] | None = None
    target_pieces: list[str] | None = None


class Translator(InferenceWrapper, TranslationEngine):
    """Translate with a trained model: tokenise, batch, search, detokenise, keep the attention.
    :meth:`load` takes a name (``"transformer-es-en"``) or a folder holding ``tokenizer.model`` (and
    ``source_tokenizer.model`` when the model has separate source and target vocabularies).

    ``tokenizer`` is the target side's (the joint one by default); ``src_tokenizer`` the source
    side's, when separate. ``src_lang``/``tgt_lang``/``corpus`` come from the model's config
    (Bible Spanish → English for models saved before languages were recorded), and so does
    ``source_spelling``: a model trained on the 1909 Bible reads input rewritten in its spelling
    (:func:`attnkit.data.spelling.to_1909`) unless ``normalize_spelling`` is False. A
    :class:`attnkit.tasks.engine.TranslationEngine`, as the CTranslate2 engines are.

    ``length_penalty``: the GNMT ``α`` beam search uses when a call gives none: the model folder's
    ``generation.json`` (chosen on its validation data, :mod:`.generation`), else 0.6."""

    companion_file, kind = MODEL_FILENAME, "a translation model"

    def __init__(self, model, tokenizer: Tokenizer, *, max_len: int = 200, src_tokenizer: Tokenizer | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.src_tokenizer = src_tokenizer or tokenizer
        self.max_len = max_len
        config = getattr(model, "config", None)
        self.max_src_len = getattr(config, "max_src_len", None) or max_len
        self.src_lang = getattr(config, "src_lang", "es")
        self.tgt_lang = getattr(config, "tgt_lang", "en")
        self.corpus = getattr(config, "corpus", "bible")
        self.source_spelling = getattr(config, "source_spelling", None) or default_spelling(self.corpus, self.src_lang)
        self.normalize_spelling = True
        self.length_penalty = DEFAULT_LENGTH_PENALTY  # load reads the model's own

    @classmethod
    def read_companion(cls, path):
        return Tokenizer.load(path)

    @classmethod
    def load(cls, model_dir, *, device="cpu", dtype=None) -> Translator:
        """:meth:`InferenceWrapper.load`, plus the source tokenizer of a model with separate vocabularies;
        a Hugging Face encoder-decoder (``hf:NAME`` or its folder, :func:`attnkit.pretrained.hf_source`)
        through :mod:`attnkit.hf`."""
        from ...data.corpus import SOURCE_TOKENIZER_FILE
        from ...pretrained import hf_source

        folder = cls.resolve_folder(model_dir)  # resolved once: the base class's load takes the folder as it is
        source = hf_source(folder)
        if source is not None:  # a Hugging Face encoder-decoder: the adapter and the model's own tokenizer
            from ...hf import load_seq2seq

            model, src_tok, tgt_tok = load_seq2seq(source, device=device, dtype=dtype)
            return cls(model, tgt_tok, src_tokenizer=src_tok)
        tr = super().load(folder, device=device, dtype=dtype)
        if (folder / SOURCE_TOKENIZER_FILE).is_file():
            tr.src_tokenizer = Tokenizer.load(folder / SOURCE_TOKENIZER_FILE)
        if (folder / GENERATION_FILE).is_file():
            tr.length_penalty = read_generation_defaults(folder).length_penalty
        return tr

    @property
    def spelling(self) -> str:
        """The spelling input is rewritten to before tokenizing: ``source_spelling``, or ``modern``
        (unchanged) when ``normalize_spelling`` is off."""
        return self.source_spelling if self.normalize_spelling else "modern"

    @property
    def language_pair(self) -> str:
        """``"es → en"``: what the model translates."""
        return f"{self.src_lang} → {self.tgt_lang}"

    def check_shortlist(self, shortlist: LexicalShortlist) -> None:
        """``ShortlistError`` unless ``shortlist`` was built with this model's tokenizer."""
        if not isinstance(shortlist, LexicalShortlist):
            raise TypeError(f"shortlist must be a LexicalShortlist, got {type(shortlist).__name__}")
        if shortlist.tokenizer_sha256 != tokenizer_digest(self.tokenizer):
            raise ShortlistError(
                "the shortlist was built with another tokenizer than this model's; "
                "build it for this model with `attnkit shortlist --model MODEL`"
            )

    def build_shortlist(
        self, pairs: Sequence, *, frequent: int = DEFAULT_FREQUENT, per_source: int = DEFAULT_PER_SOURCE
    ) -> LexicalShortlist:
        """A :class:`LexicalShortlist` counted over ``pairs`` (objects with ``src`` and ``tgt`` text,
        e.g. :func:`attnkit.data.datasets.bible.load_pairs` of the training split), with this model's tokenizer."""
        tok = self.tokenizer
        return LexicalShortlist.build(
            self.src_tokenizer.encode_batch([p.src for p in pairs]),
            tok.encode_batch([p.tgt for p in pairs]),
            vocab_size=max(len(tok), len(self.src_tokenizer)),
            tokenizer_sha256=tokenizer_digest(tok),
            frequent=frequent,
            per_source=per_source,
        )

    def encode_sources(self, sentences: Sequence[str], *, truncate: bool = False) -> list[list[int]]:
        """Subword ids of each sentence (see :func:`attnkit.data.tokenizer.encode_sources`)."""
        return encode_sources(
            self.src_tokenizer, sentences, self.max_src_len, truncate=truncate, spelling=self.spelling
        )

    def attention(self, source: str, target: str | Sequence[int]) -> TranslationAttention:
        """All the model's attention when it reads ``source`` and is forced to write ``target``
        (teacher forcing): ``target`` is target-language text (tokenised here, e.g. a reference) or the
        token ids of a translation (``result.tokens``)."""
        return self.attention_batch([source], [target])[0]

    @torch.no_grad()
    def attention_batch(
        self, sources: Sequence[str], targets: Sequence[str | Sequence[int]]
    ) -> list[TranslationAttention]:
        """:meth:`attention` of each pair, in one padded teacher-forced pass (a server's batch of
        translations draws its maps at once). Padding changes nothing a pair sees: source padding is
        masked (or packed, in an RNN), and a target row attends only to the rows before it.

        A model trained with guided alignment whose head reads the step whose input is each target piece
        is forced one step more (the last piece as input): that step's row belongs to no map, and the rows
        before it are unchanged (a row sees only the rows before it), so the same pass gives the maps and
        the guided head's rows (``guided``), which ``attnkit align`` reads in a pass of its own."""
        if len(sources) != len(targets):
            raise ValueError(f"sources and targets differ in number: {len(sources)} and {len(targets)}")
        return self.attention_ids(self.encode_sources(sources), targets)

    @torch.no_grad()
    def attention_ids(
        self, src_ids: Sequence[Sequence[int]], targets: Sequence[str | Sequence[int]]
    ) -> list[TranslationAttention]:
        """:meth:`attention_batch` of sources already tokenised (:meth:`encode_sources`' ids), so a caller
        that holds them (:func:`attnkit.attribution.forced_translation`) does not tokenise them again."""
        if len(src_ids) != len(targets):
            raise ValueError(f"src_ids and targets differ in number: {len(src_ids)} and {len(targets)}")
        src_ids = [[int(t) for t in s] for s in src_ids]
        tgt_ids = []
        for target in targets:
            if isinstance(target, str):
                if not target.strip():
                    raise InputError("target is empty: give the target text (or token ids) to align with")
                ids = self.tokenizer.encode(check_unicode(target, "the target").strip())
                if not ids:
                    raise no_readable_word("the target")
            else:
                ids = [int(t) for t in target]
            if not ids:
                raise InputError("target has no tokens: there is no output token to show attention for")
            tgt_ids.append(ids)
        guided = guided_head(getattr(self.model, "config", None))
        extra = int(guided is not None and guided[2])  # the guided head reads the input steps: one step more
        B, S, T = len(src_ids), max(map(len, src_ids)), max(map(len, tgt_ids)) + extra
        src = torch.zeros(B, S, dtype=torch.long)
        tgt_in = torch.full((B, T), self.tokenizer.eos_id, dtype=torch.long)  # past a pair's end: never seen
        for b, (s_ids, t_ids) in enumerate(zip(src_ids, tgt_ids)):
            src[b, : len(s_ids)] = torch.as_tensor(s_ids)
            forced = [self.tokenizer.bos_id, *(t_ids if extra else t_ids[:-1])]
            tgt_in[b, : len(forced)] = torch.as_tensor(forced)
        lengths = torch.tensor([len(s) for s in src_ids])
        maps = self.model.attention_maps(src.to(self.device), lengths.to(self.device), tgt_in.to(self.device))
        maps = maps.map_tensors(lambda t: t.float().cpu())
        heads = None if guided is None or maps.cross is None else maps.cross[:, guided[0] - 1, guided[1] - 1]
        # (B, T, S): row t + extra is the guided head's row for target piece t
        return [
            TranslationAttention(
                source_pieces=[self.src_tokenizer.id_to_piece(t) for t in s_ids],
                target_pieces=[self.tokenizer.id_to_piece(t) for t in t_ids],
                maps=maps.unpad(b, len(t_ids), len(s_ids)),
                guided=None if heads is None else heads[b, extra : extra + len(t_ids), : len(s_ids)],
            )
            for b, (s_ids, t_ids) in enumerate(zip(src_ids, tgt_ids))
        ]

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 1,
        length_penalty: float | None = None,
        batch_size: int = 64,
        return_attention: bool = False,
        truncate: bool = False,
        shortlist: LexicalShortlist | None = None,
    ) -> list[Translation]:
        """Translate ``sentences`` (:class:`Translation` results: ``attention`` and the pieces filled on
        request). Sentences
        longer than the model's maximum raise ``ValueError`` (or are cut, with ``truncate``).
        ``shortlist``: search over each batch's lexical shortlist instead of the whole vocabulary
        (faster; ``score`` is then normalised over the shortlist). ``length_penalty``: beam search's GNMT
        ``α`` (default: :attr:`length_penalty`, the model's own)."""
        ids = self.encode_sources(sentences, truncate=truncate)
        results = self.translate_ids(
            ids,
            beam_size=beam_size,
            length_penalty=length_penalty,
            batch_size=batch_size,
            return_attention=return_attention,
            shortlist=shortlist,
        )
        for r, s in zip(results, sentences):
            r.source = s
        return results

    @torch.no_grad()
    def translate_ids(
        self,
        ids: Sequence[Sequence[int]],
        *,
        beam_size: int = 1,
        length_penalty: float | None = None,
        batch_size: int = 64,
        return_attention: bool = False,
        shortlist: LexicalShortlist | None = None,
    ) -> list[Translation]:
        """Translate already-tokenised sources (lists of subword ids), batching similar lengths."""
        self.model.eval()
        alpha = self.length_penalty if length_penalty is None else check_length_penalty(length_penalty)
        if shortlist is not None:
            self.check_shortlist(shortlist)
        tok = self.tokenizer
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths share a batch
        results: list[Translation | None] = [None] * len(ids)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            lens = torch.tensor([len(ids[i]) for i in chunk])
            src = torch.zeros(len(chunk), int(lens.max()), dtype=torch.long)
            for r, i in enumerate(chunk):
                src[r, : len(ids[i])] = torch.as_tensor(list(ids[i]), dtype=torch.long)
            inputs = {"src": src.to(self.device), "src_lengths": lens.to(self.device)}
            max_len = min(self.max_len, int(lens.max()) * 2 + 10)
            # the output layer prepared once for the batch (and searched in the shortlist's token space)
            vocab = None if shortlist is None else shortlist.ids_for(src, always=(tok.bos_id, tok.eos_id, tok.unk_id))
            model = OutputLayerDecoder(self.model, vocab)
            bos, eos = model.index_of(tok.bos_id), model.index_of(tok.eos_id)
            hyps = search(
                model,
                inputs,
                beam_size=beam_size,
                bos_id=bos,
                eos_id=eos,
                max_len=max_len,
                length_penalty=alpha,
                return_attention=return_attention,
            )
            for h in hyps:
                h.tokens = model.vocabulary_ids(h.tokens)
            for i, h in zip(chunk, hyps):
                res = Translation(self.tokenizer.decode(h.tokens), h.tokens, h.score)
                if return_attention and h.attention is not None:
                    res.attention = h.attention[:, : len(ids[i])]
                    res.source_pieces = [self.src_tokenizer.id_to_piece(t) for t in ids[i]]
                    res.target_pieces = [self.tokenizer.id_to_piece(t) for t in h.tokens]
                results[i] = res
        return results  # type: ignore[return-value]
