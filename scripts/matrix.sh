#!/usr/bin/env bash
# The test matrix: fresh environments for the oldest and the newest supported sets, and the README's
# test command (python -m pytest -q, plus any extra pytest arguments) in each.
#
#   bash scripts/matrix.sh min    [PYTEST_ARGS...]   Python 3.11 + the declared minimums (ci/constraints-min.txt)
#   bash scripts/matrix.sh newest [PYTEST_ARGS...]   Python 3.13 + the newest releases that install
#
# e.g. `bash scripts/matrix.sh newest -m "not slow"` (the quick subset). Environment:
#   MATRIX_DIR   where the environments go (default .matrix/ in the repository, git-ignored); each is
#                built by scripts/bootstrap.sh (VENV=$MATRIX_DIR/<set>), so a re-run reuses it
#   FRESH=1      delete the environment first
# The interpreter is python3.X on PATH, else pyenv's newest 3.X; the resolved versions are written to
# $MATRIX_DIR/<set>-versions.txt (pip freeze) and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
set_name="${1:-}"
case "$set_name" in
  min) minor=3.11; constraints=ci/constraints-min.txt ;;
  newest) minor=3.13; constraints= ;;
  *) echo "usage: bash scripts/matrix.sh min|newest [PYTEST_ARGS...]" >&2; exit 2 ;;
esac
shift

find_python() {  # $1 = 3.X: a working python3.X on PATH, else pyenv's newest 3.X.*
  local minor="$1" v
  if command -v "python$minor" >/dev/null 2>&1 && "python$minor" -c "" 2>/dev/null; then
    command -v "python$minor"; return 0
  fi
  if command -v pyenv >/dev/null 2>&1; then
    v="$(pyenv versions --bare 2>/dev/null | grep -E "^${minor//./\\.}\.[0-9]+$" | sort -V | tail -1 || true)"
    if [ -n "$v" ] && [ -x "$(pyenv root)/versions/$v/bin/python$minor" ]; then
      echo "$(pyenv root)/versions/$v/bin/python$minor"; return 0
    fi
  fi
  return 1
}

py="$(find_python "$minor")" || {
  echo "matrix: Python $minor not found (neither python$minor on PATH nor in pyenv); install it" >&2; exit 1; }
root="${MATRIX_DIR:-.matrix}"
venv="$root/$set_name"
mkdir -p "$root"
if [ "${FRESH:-0}" = 1 ]; then rm -rf "$venv"; fi
echo "matrix [$set_name]: $("$py" --version) ($py), environment $venv${constraints:+, constraints $constraints}"
start=$SECONDS
PYTHON="$py" VENV="$venv" CONSTRAINTS="$constraints" bash scripts/bootstrap.sh
echo "matrix [$set_name]: environment ready in $((SECONDS - start)) s"
"$venv/bin/python" -m pip freeze --exclude-editable > "$root/$set_name-versions.txt"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md, sys
names = ["jax", "jaxlib", "flax", "optax", "numpy", "scipy", "transformers", "torch", "tokenizers"]
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"
have = {n: version(n) for n in names}
print("matrix versions: python", sys.version.split()[0], " ".join(f"{n} {v}" for n, v in have.items()))
PY
start=$SECONDS
rc=0
"$venv/bin/python" -m pytest -q "$@" || rc=$?
echo "matrix [$set_name]: pytest exit $rc in $((SECONDS - start)) s"
exit "$rc"
