"""What both ``--format huggingface`` exports share (the translator's, :mod:`attnkit.deploy.hf_export`, and the
language model's, :mod:`attnkit.deploy.hf_lm_export`): the module that builds the ``transformers`` objects
(or the one-line refusal naming the extra to install), the sentences each export checks itself on, and
the last touches to the saved folder (the tokenizer's portable class name, the files' permissions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .manifest import DeployError

__all__ = ["CHECK_SENTENCES", "HF_EXTRA_HINT", "hf_objects", "make_readable", "portable_tokenizer_config"]

HF_EXTRA_HINT = "pip install 'attnkit[hf]'"
#: Sentences the export checks its tokenizer and its logits on (both languages of the shipped model).
CHECK_SENTENCES = (
    "En el principio creó Dios los cielos y la tierra.",
    "Y dijo Dios: Sea la luz; y fue la luz.",
    "Jesús lloró.",
    "In the beginning, God created the heavens and the earth.",
    "«¿Quién es éste?» — preguntó él,   señalando al niño.",
)


def hf_objects():
    """:mod:`attnkit.hf.export` (what builds the ``transformers`` objects), or a one-line DeployError naming
    the extra to install when ``transformers`` is missing."""
    from ..hf import export
    from ..hf.loading import HFModelError

    try:
        export.transformers_version()
    except HFModelError:
        raise DeployError(f"the huggingface export needs transformers: {HF_EXTRA_HINT}") from None
    return export


def portable_tokenizer_config(path: Path) -> None:
    """Name the generic fast tokenizer class, which every ``transformers`` since 4.x knows (5.x
    writes its new name, ``TokenizersBackend``, an alias of the same class)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_readable(folder: Path) -> None:
    """Give the written files the permissions the umask allows (a temporary folder's files may be private)."""
    umask = os.umask(0)
    os.umask(umask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~umask)
