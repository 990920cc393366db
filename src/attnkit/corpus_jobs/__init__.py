"""Corpus-scale jobs split across processes: a shared line index, parts, a manifest, resume.

A job over a many-line input (translate a file, align a corpus) is cut into *parts* of a fixed
number of lines. Each rank of a ``torchrun`` launch reads only its parts' lines, by byte
offsets from a line index built once per input file (:mod:`.line_index`), and writes each part
atomically, recorded in a manifest (:mod:`.parts`). Rank 0 concatenates the parts in input
order, so the output is byte-identical to a single-process run; a rerun of the same job reuses
the finished parts and redoes only the rest.
"""

from attnkit.corpus_jobs.line_index import LineIndex, open_line_index
from attnkit.corpus_jobs.parts import PartFailed, PartPlan, PartStore, auto_part_lines
from attnkit.corpus_jobs.run import run_job

__all__ = ["LineIndex", "PartFailed", "PartPlan", "PartStore", "auto_part_lines", "open_line_index", "run_job"]
