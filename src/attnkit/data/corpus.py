"""Named parallel corpora: the built-in Bible, and the user's own, prepared once under ``$ATTNKIT_HOME``.

``attnkit data prepare parallel NAME --src-lang xx --tgt-lang yy --train SRC TGT`` (or one TSV)
calls :func:`prepare_parallel`, which, like OpenNMT-py's ``onmt_build_vocab`` and fairseq's
``fairseq-preprocess`` together:

1. reads the files and drops the pairs it cannot use, counting each reason and keeping the first
   line numbers (:mod:`attnkit.data.corpus_filter`: a side empty, a side holding a NUL byte, a side
   too long); see :func:`prepare_parallel` for what is dropped and what is refused, and why;
2. without ``--valid``/``--test``, holds out a deterministic share of the pairs: a pair goes by the
   SHA-256 of its source sentence, so duplicates of a source sentence always land in the same
   split and the split is the same on every machine. Each missing split gets
   ``min(HELDOUT_SHARE, HELDOUT_MAX / pairs)`` of the pairs (3 %, at most ~2,000 pairs);
3. counts training pairs whose source sentence is, exactly, a test source sentence (a test
   set seen in training flatters every score) and reports them;
4. trains sentencepiece on the training side only: one joint model of both sides (the default,
   so a model can tie its embeddings), or one per side with ``separate_vocab``, in a spawned
   process whose memory goes back when it ends; on a big corpus it sees a seeded uniform sample of
   :data:`SPM_MAX_SENTENCES` sentences a model;
5. tokenises every split once, in parallel over the cores, into the memory-mapped token cache
   (:mod:`attnkit.data.token_cache`) that training streams.

Everything is written into a temporary folder beside the corpus and renamed into place
(``os.replace``) only when complete, so an interrupted prepare leaves no corpus that a later
``train --data NAME`` would read. The folder ``$ATTNKIT_HOME/corpora/NAME`` holds ``meta.json``
(languages, counts, what was dropped), ``SPLIT.tsv`` (source, target, line of the input file),
the tokenizer(s) and the token cache; ``meta.json``'s ``written`` lists every file the prepare wrote,
the only ones ``--force`` replaces (:mod:`attnkit.output_folder`): a corpus folder holding a file of
the user's, or a folder of that name that no prepare wrote, is refused and nothing in it removed.

:func:`open_corpus` gives one interface over both kinds (:class:`Corpus`): the languages, the pairs
of a split, the tokenizers, the token cache. ``"bible"`` is the built-in Spanish→English corpus
(:mod:`attnkit.data.datasets.bible`), prepared from the SWORD modules on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AttnkitError, no_such_file
from ..output_folder import check_output_folder, files_in, replace_output_folder
from ..paths import attnkit_home
from .corpus_filter import DEFAULT_MAX_CHARS, DEFAULT_MAX_WORDS, DROPPED_REASONS, describe_dropped, read_split
from .datasets.bible import SPLITS, Pair
from .parallel import ParallelDataError, read_lines
from .tokenizer import Tokenizer

__all__ = [
    "BIBLE",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_WORDS",
    "DROPPED_REASONS",
    "Corpus",
    "CorpusError",
    "UnknownCorpusError",
    "corpora_dir",
    "describe_dropped",
    "known_corpora",
    "open_corpus",
    "prepare_parallel",
]

BIBLE = "bible"
FORMAT_VERSION = 1
#: The share of pairs a missing held-out split takes, and the most pairs it takes.
HELDOUT_SHARE = 0.03
HELDOUT_MAX = 2000
HELDOUT_SALT = "attnkit-heldout-v1"
#: sentencepiece trains on at most this many sentences (a seeded uniform sample) per model. Its
#: unigram trainer needs about 4 KB per sentence of ~140 characters (the suffix array over the text
#: and the seed pieces: 1.8 GB peak for 400,000 Bible sentences, 7.8 GB for 2,000,000 through its
#: own sampler), so 300,000 keeps a prepare under 2 GB; that is still 5× the Bible's whole training
#: side, ample for 8k-32k pieces. ``--tokenizer-sample`` raises it where memory allows.
SPM_MAX_SENTENCES = 300_000
#: Tokenizer file names inside a corpus folder (and a checkpoint): the joint or target model, and
#: the source model when the vocabularies are separate.
TOKENIZER_FILE = "tokenizer.model"
SOURCE_TOKENIZER_FILE = "source_tokenizer.model"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_LANG = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*")


class CorpusError(AttnkitError, ValueError):
    """A corpus cannot be prepared or read as asked (the message says why and what to do)."""


class UnknownCorpusError(CorpusError):
    """A ``--data`` name that is neither ``bible`` nor a prepared corpus; the message lists the known ones."""


def corpora_dir(home: str | os.PathLike | None = None) -> Path:
    """Where prepared corpora live: ``$ATTNKIT_HOME/corpora``."""
    return attnkit_home(home) / "corpora"


def known_corpora(home: str | os.PathLike | None = None) -> list[str]:
    """``bible`` and every completely prepared corpus under :func:`corpora_dir`, sorted."""
    folder = corpora_dir(home)
    names = []
    if folder.is_dir():
        names = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".") and (p / "meta.json").is_file())
    return [BIBLE] + [n for n in names if n != BIBLE]


# ---------------------------------------------------------------------------------------------
# The interface over both kinds of corpus
# ---------------------------------------------------------------------------------------------


@dataclass
class Corpus:
    """A named parallel corpus: its languages, its splits, its tokenizer(s), its token cache.

    ``path`` is the prepared folder (``None`` for the Bible, which lives in :mod:`attnkit.data.datasets.bible`).
    """

    name: str
    src_lang: str
    tgt_lang: str
    path: Path | None = None
    home: Path | None = None
    meta: dict = field(default_factory=dict)

    def turned_around(self, src_lang: str | None, tgt_lang: str | None) -> bool:
        """Whether a model translating ``src_lang`` → ``tgt_lang`` reads this corpus the other way round
        (``transformer-en-es`` on the Bible): its sources are the corpus's targets. Never for a corpus of one
        language on both sides (King James → World English Bible, ``en`` → ``en``), which is read as prepared."""
        return self.src_lang != self.tgt_lang and (src_lang, tgt_lang) == (self.tgt_lang, self.src_lang)

    @property
    def separate_vocab(self) -> bool:
        return bool(self.meta.get("separate_vocab", False))

    @property
    def vocab_size(self) -> int | None:
        """The vocabulary size the corpus was prepared with (``None`` for the Bible: any)."""
        return self.meta.get("vocab_size")

    def split_size(self, split: str) -> int:
        if self.path is None:
            return len(self.pairs(split))
        return int(self.meta["splits"].get(split, 0))

    def pairs(self, split: str, limit: int | None = None) -> list[Pair]:
        """The pairs of ``split`` ("train", "valid", "test"), the first ``limit`` of them when given;
        ``ref`` is the verse (Bible) or ``FILE:LINE`` of the input (prepared corpora)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self.path is None:
            from .datasets.bible import load_pairs

            return load_pairs(split, home=self.home, limit=limit)
        return list(self.iter_pairs(split, limit))

    def iter_pairs(self, split: str, limit: int | None = None) -> Iterator[Pair]:
        if self.path is None:
            yield from self.pairs(split, limit)
            return
        path = self.path / f"{split}.tsv"
        if not path.is_file():
            return
        files = self.meta.get("files", {})
        origin = files.get(split) or files.get("train") or [split]  # a held-out split's lines are the train file's
        with open(path, encoding="utf-8", newline="\n") as f:
            for i, line in enumerate(f):
                if limit is not None and i >= limit:
                    break
                src, tgt, lineno = line.rstrip("\n").split("\t")
                yield Pair(src, tgt, f"{Path(origin[0]).name}:{lineno}")

    def tokenizers(self, vocab_size: int | None = None) -> tuple[Tokenizer, Tokenizer]:
        """``(source, target)`` tokenizers; the same object twice for a joint vocabulary.

        The Bible's joint model is trained on first use for ``vocab_size`` (default 8,000) and cached;
        a prepared corpus has its own, and ``vocab_size`` must be ``None`` or its size.
        """
        if self.path is None:
            from .datasets.bible import get_tokenizer

            tok = get_tokenizer(vocab_size or 8000, self.home)
            return tok, tok
        if vocab_size is not None and vocab_size != self.vocab_size:
            raise CorpusError(
                f"corpus {self.name!r} was prepared with a vocabulary of {self.vocab_size}, not {vocab_size}: "
                f"leave --vocab-size out, or prepare it again with --vocab-size {vocab_size} --force"
            )
        tgt = Tokenizer.load(self.path / TOKENIZER_FILE)
        src = Tokenizer.load(self.path / SOURCE_TOKENIZER_FILE) if self.separate_vocab else tgt
        return src, tgt

    def token_cache(self, split: str):
        """``(source, target)`` :class:`attnkit.data.token_cache.TokenArray` of ``split``, memory-mapped;
        ``None`` for the Bible (trained from memory)."""
        if self.path is None:
            return None
        from .token_cache import TokenArray

        self._ensure_token_cache(split)
        dtype = self.meta["token_dtype"]
        return TokenArray(self.path / "cache" / f"{split}.src", dtype), TokenArray(
            self.path / "cache" / f"{split}.tgt", dtype
        )

    def _ensure_token_cache(self, split: str) -> None:
        """Rebuild ``split``'s token cache from ``SPLIT.tsv`` and the corpus's own tokenizers when a file of it
        is missing (a cache folder removed to save space, or not copied with the corpus): it is a cache, so its
        loss costs the time to tokenise again, not the corpus. Written beside the cache and moved in file by
        file (``os.replace``), so a rank of a distributed run that rebuilds it at the same time reads whole files."""
        import sys

        from .token_cache import build_token_cache

        cache = self.path / "cache"
        names = [f"{split}.{side}.{ext}" for side in ("src", "tgt") for ext in ("bin", "idx")]
        if all((cache / n).is_file() for n in names):
            return
        print(
            f"attnkit: corpus {self.name!r}: the token cache of its {split} split is missing; rebuilding it "
            f"from {split}.tsv",
            file=sys.stderr,
        )
        tgt_proto = (self.path / TOKENIZER_FILE).read_bytes()
        src_proto = (self.path / SOURCE_TOKENIZER_FILE).read_bytes() if self.separate_vocab else tgt_proto
        tmp = cache / f".{split}.tmp-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        try:

            def pairs():
                with open(self.path / f"{split}.tsv", encoding="utf-8", newline="\n") as f:
                    for line in f:
                        src, tgt, _ = line.split("\t")
                        yield src, tgt

            build_token_cache(pairs(), tmp / split, src_proto, tgt_proto, Tokenizer(tgt_proto).vocab_size)
            for n in names:
                os.replace(tmp / n, cache / n)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def open_corpus(name: str, home: str | os.PathLike | None = None) -> Corpus:
    """The corpus ``name``: ``"bible"`` or one prepared with :func:`prepare_parallel`.

    An unknown name is an :class:`UnknownCorpusError` listing the known ones."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    home_path = attnkit_home(home)
    if name == BIBLE:
        return Corpus(BIBLE, "es", "en", None, home_path, {"has_test": True})
    folder = corpora_dir(home) / name
    meta_path = folder / "meta.json"
    if not _NAME.fullmatch(name) or not meta_path.is_file():
        known = ", ".join(known_corpora(home))
        raise UnknownCorpusError(
            f"unknown corpus {name!r} (known: {known}); prepare one with "
            "`attnkit data prepare parallel NAME --src-lang xx --tgt-lang yy --train SRC TGT`"
        )
    meta = json.loads(meta_path.read_text("utf-8"))
    if meta.get("format_version") != FORMAT_VERSION:
        raise CorpusError(f"corpus {name!r} was prepared by another attnkit version; prepare it again with --force")
    return Corpus(name, meta["src_lang"], meta["tgt_lang"], folder, home_path, meta)


# ---------------------------------------------------------------------------------------------
# Preparing a user's corpus
# ---------------------------------------------------------------------------------------------


def _heldout_bucket(src: str) -> float:
    """A number in [0, 1) fixed by the source sentence (salted SHA-256), for the held-out split."""
    digest = hashlib.sha256(f"{HELDOUT_SALT}:{src}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _check_files(option: str, files) -> tuple[Path, ...] | None:
    if files is None:
        return None
    files = tuple(Path(f) for f in files)
    if len(files) not in (1, 2):
        raise CorpusError(f"--{option}: give two aligned files (SRC TGT) or one TSV file, got {len(files)}")
    return files


def _train_tokenizers(folder: Path, vocab_size: int, separate: bool, sample: int, n: int) -> tuple[bytes, bytes]:
    """sentencepiece on the training side of ``folder/train.tsv`` (``n`` pairs): ``(source, target)`` model bytes."""

    def side(k: int) -> Iterator[str]:
        with open(folder / "train.tsv", encoding="utf-8", newline="\n") as f:
            for line in f:
                yield line.split("\t", 2)[k]

    def train(texts, count):
        if count > sample:  # a big corpus: a seeded uniform sample of exactly `sample` sentences
            # (drawn here rather than by sentencepiece's own reservoir, which peaked at 2.7 GB against
            # 1.8 GB for the same 400,000 sentences)
            keep = set(random.Random(0).sample(range(count), sample))
            texts = (t for i, t in enumerate(texts) if i in keep)
        try:
            return Tokenizer.train(texts, vocab_size=vocab_size)
        except RuntimeError as exc:  # e.g. a vocabulary bigger than the text allows
            most = re.search(r"value <= (\d+)", str(exc))
            if most:  # sentencepiece's "INTERNAL: trainer_interface.cc(...) Vocabulary size too high"
                raise CorpusError(
                    f"--vocab-size {vocab_size}: the training text has too few distinct pieces for it; sentencepiece "
                    f"can make at most {most.group(1)}: give --vocab-size {most.group(1)} or less, or more text"
                ) from None
            raise CorpusError(f"sentencepiece could not train a {vocab_size}-piece vocabulary: {exc}") from None

    if separate:
        src, tgt = train(side(0), n), train(side(1), n)
    else:
        joint = train((t for k in (0, 1) for t in side(k)), 2 * n)
        src = tgt = joint
    tgt.save(folder)  # tokenizer.model: the joint or target model
    if separate:
        (folder / SOURCE_TOKENIZER_FILE).write_bytes(src.to_bytes())
    return src.to_bytes(), tgt.to_bytes()


def _train_tokenizers_apart(folder: Path, vocab_size: int, separate: bool, sample: int, n: int) -> tuple[bytes, bytes]:
    """:func:`_train_tokenizers` in a process of its own (spawned, not forked), so that the gigabytes
    sentencepiece allocates on a big sample go back to the system when it ends: a process's heap
    seldom shrinks, and the token-cache workers forked afterwards would each start from it."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_train_tokenizers, folder, vocab_size, separate, sample, n).result()


_PREPARED = re.compile(r"^(train|valid|test)\.tsv$|^meta\.json$|^(source_)?tokenizer\.model$|^cache/")


def _corpus_files(folder: Path) -> set[str] | None:
    """The files a prepare wrote in ``folder`` (its ``meta.json``'s ``written``), or None when no prepare
    wrote it (no ``meta.json``). A corpus prepared before the list was kept: the files of a prepare's
    layout (``SPLIT.tsv``, ``meta.json``, the tokenizers, ``cache/``); anything else is the user's."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    written = meta.get("written")
    if isinstance(written, list) and all(isinstance(f, str) for f in written):
        return set(written)
    return {f for f in files_in(folder) if _PREPARED.match(f)}


def _remove_stale(root: Path, name: str) -> None:
    """Temporary folders of this corpus left by prepares that died (their process is gone)."""
    for tmp in root.glob(f".{name}.partial-*"):
        try:
            pid = int(tmp.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            pass


def prepare_parallel(
    name: str,
    *,
    src_lang: str,
    tgt_lang: str,
    train: tuple | list,
    valid: tuple | list | None = None,
    test: tuple | list | None = None,
    vocab_size: int = 8000,
    separate_vocab: bool = False,
    max_words: int = DEFAULT_MAX_WORDS,
    max_chars: int = DEFAULT_MAX_CHARS,
    home: str | os.PathLike | None = None,
    force: bool = False,
    workers: int | None = None,
    spm_max_sentences: int = SPM_MAX_SENTENCES,
) -> Corpus:
    """Prepare ``$ATTNKIT_HOME/corpora/NAME`` from the user's files (see the module docstring).

    ``train``/``valid``/``test``: ``(SRC, TGT)`` aligned files or ``(PAIRS.tsv,)``. Returns the
    prepared :class:`Corpus`; its ``meta`` holds the counts (kept; dropped, by reason, with the first
    line numbers; test sources found in the training data). Bad input is a :class:`CorpusError` or
    :class:`attnkit.data.parallel.ParallelDataError`, raised before anything is in place.

    What is dropped (and counted) and what is refused, line by line:

    - **dropped**: a pair with a side that is empty, holds a NUL byte, or is over ``max_words`` words
      or ``max_chars`` characters. Each is a fault of that one line (a blank, a stray binary
      fragment, a misaligned paragraph or a line of markup), common in crawled corpora, and the rest
      of the file is good; OpenNMT-py's filters and Moses' ``clean-corpus-n.perl`` drop the same. A
      file where every pair is dropped (a UTF-16 file is NUL on every line) ends in a
      :class:`CorpusError` that gives the counts.
    - **refused**: a byte sequence that is not UTF-8, as a :class:`ParallelDataError` naming file,
      line and byte offset. It is a fault of the whole file (another encoding, Latin-1 most often),
      whose every accented line would be dropped, silently skewing the corpus towards ASCII
      sentences; the message gives the one ``iconv`` command that fixes it (or drops the damaged
      bytes, for a file with a few). Also refused: a TSV line without exactly two columns, and
      aligned files of different lengths, after which no line pairs are known to be translations.
    """
    from .token_cache import build_token_cache, token_dtype

    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == BIBLE:
        raise CorpusError(
            f"corpus name {name!r}: use letters, digits, '.', '_' or '-' (at most 64, not 'bible'), e.g. kjv-web"
        )
    for option, lang in (("src-lang", src_lang), ("tgt-lang", tgt_lang)):
        if not isinstance(lang, str) or not _LANG.fullmatch(lang):
            raise CorpusError(f"--{option} {lang!r}: give a language code such as en, de, pt-BR, eng")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 300:
        raise CorpusError(f"--vocab-size must be an int >= 300 (260 pieces are bytes and specials), got {vocab_size!r}")
    for option, value in (("max-words", max_words), ("max-chars", max_chars)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CorpusError(f"--{option} must be a positive int, got {value!r}")
    files = {"train": _check_files("train", train), "valid": _check_files("valid", valid)}
    files["test"] = _check_files("test", test)
    if files["train"] is None:
        raise CorpusError("--train: give the training files (SRC TGT, or one TSV)")
    for paths in files.values():  # fail fast, before minutes of work
        for p in paths or ():
            if not Path(p).is_file():
                raise ParallelDataError(no_such_file(p))

    root = corpora_dir(home)
    final = root / name
    if (final / "meta.json").is_file() and not force:
        raise CorpusError(f"corpus {name!r} is already prepared in {final}; add --force to prepare it again")
    check_output_folder(final, force=True, owned=_corpus_files)  # before the work; again before the swap
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale(root, name)
    tmp = root / f".{name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    start = time.perf_counter()
    try:
        dropped = {split: dict.fromkeys(DROPPED_REASONS, 0) for split in SPLITS}
        dropped_lines: dict = {split: {reason: [] for reason in DROPPED_REASONS} for split in SPLITS}
        counts = dict.fromkeys(SPLITS, 0)
        test_sources: set[bytes] = set()
        with contextlib.ExitStack() as stack:
            out = {s: stack.enter_context(open(tmp / f"{s}.tsv", "w", encoding="utf-8", newline="\n")) for s in SPLITS}

            def write(split: str, src: str, tgt: str, lineno: int) -> None:
                out[split].write(f"{src}\t{tgt}\t{lineno}\n")
                counts[split] += 1

            for split in ("test", "valid"):  # the given held-out files first: train is checked against test
                if files[split] is not None:
                    for lineno, src, tgt in read_split(
                        files[split], max_words, max_chars, dropped[split], dropped_lines[split]
                    ):
                        write(split, src, tgt, lineno)
                        if split == "test":
                            test_sources.add(hashlib.sha1(src.encode()).digest())
            missing = [s for s in ("test", "valid") if files[s] is None]
            share = 0.0
            if missing:
                from .parallel import count_lines

                n_lines = count_lines(files["train"][0])
                share = min(HELDOUT_SHARE, HELDOUT_MAX / max(n_lines, 1))
            seen_in_train = 0
            for lineno, src, tgt in read_split(
                files["train"], max_words, max_chars, dropped["train"], dropped_lines["train"]
            ):
                split = "train"
                if missing:
                    u = _heldout_bucket(src)
                    if u < share * len(missing):
                        split = missing[int(u // share)]
                if split == "test":
                    test_sources.add(hashlib.sha1(src.encode()).digest())
                elif split == "train" and files["test"] is not None:
                    seen_in_train += hashlib.sha1(src.encode()).digest() in test_sources
                write(split, src, tgt, lineno)
        if counts["train"] == 0:
            gone = describe_dropped(
                {"dropped": dropped, "dropped_lines": dropped_lines, "max_words": max_words, "max_chars": max_chars},
                "train",
            )
            raise CorpusError(f"{files['train'][0]}: no training pair left (dropped {gone})")
        src_proto, tgt_proto = _train_tokenizers_apart(
            tmp, vocab_size, separate_vocab, spm_max_sentences, counts["train"]
        )
        real_vocab = Tokenizer(tgt_proto).vocab_size
        (tmp / "cache").mkdir()
        for split in SPLITS:

            def pairs(split=split):
                with open(tmp / f"{split}.tsv", encoding="utf-8", newline="\n") as f:
                    for line in f:
                        src, tgt, _ = line.split("\t")
                        yield src, tgt

            build_token_cache(pairs(), tmp / "cache" / split, src_proto, tgt_proto, real_vocab, workers=workers)
        meta = {
            "format_version": FORMAT_VERSION,
            "name": name,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "files": {s: [str(Path(p).resolve()) for p in f] for s, f in files.items() if f is not None},
            "heldout": {
                "from_train": [s for s in ("test", "valid") if files[s] is None],
                "share": share if any(files[s] is None for s in ("test", "valid")) else 0.0,
                "salt": HELDOUT_SALT,
            },
            "splits": counts,
            "dropped": dropped,
            "dropped_lines": dropped_lines,
            "max_words": max_words,
            "max_chars": max_chars,
            "test_sources_in_train": seen_in_train,
            "vocab_size": real_vocab,
            "separate_vocab": bool(separate_vocab),
            "token_dtype": token_dtype(real_vocab).name,
            "spm_max_sentences": spm_max_sentences,
            "seconds": round(time.perf_counter() - start, 2),
        }
        meta["written"] = sorted(files_in(tmp) | {"meta.json"})  # what --force may replace, and nothing else
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        replace_output_folder(
            tmp, final, force=True, aside=root / f".{name}.old-{os.getpid()}", owned=_corpus_files
        )  # the old corpus renamed aside, removed once the new one is in place
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Corpus(name, src_lang, tgt_lang, final, attnkit_home(home), meta)


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """Every line of a UTF-8 text file (``.gz``, BOM and CRLF handled), stripped; for ``--src``/``--ref``."""
    return [line.strip() for _, line in read_lines(path)]
