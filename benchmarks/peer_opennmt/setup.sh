#!/usr/bin/env bash
# OpenNMT-py 3.5.1 in its own virtualenv, beside attnkit's torch 2.13.0 (CPU build from this machine's disk).
#
# OpenNMT-py 3.5.1 declares torch<2.3 and spacy; we install it with --no-deps and add the packages it
# really imports for RNN/Transformer training and translation. Its transforms package imports every
# transform module when loaded, and two of them import spacy and fasttext at module level (terminology,
# and the fasttext-based filters). We use none of those transforms, so those two names are provided as
# empty stub modules (stubs/), put on PYTHONPATH by run.py: an import that succeeds but a transform that
# would fail if anyone used it. pyahocorasick is the real package the terminology transform also imports.
set -euo pipefail
venv=${1:?usage: setup.sh VENV_DIR}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps OpenNMT-py==3.5.1
"$venv/bin/pip" install -q --disable-pip-version-check configargparse pyyaml sentencepiece sacrebleu pyonmttok \
    rapidfuzz waitress six tensorboard pyahocorasick
PYTHONPATH="$here/stubs" "$venv/bin/onmt_train" -h >/dev/null
echo "OpenNMT-py ready in $venv"
