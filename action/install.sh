#!/usr/bin/env bash
# The action's first step (action.yml): ddp-doctor into a virtualenv of its own under
# RUNNER_TEMP, never into the runner's Python (a PEP 668 system Python refuses that, and a
# virtualenv's Python is the user's training environment). Variables in:
#   INSTALL_PYTHON       the Python that creates the virtualenv (3.10 or newer)
#   GITHUB_ACTION_PATH   this action's checkout, installed by path
# Out, to $GITHUB_OUTPUT: doctor (the ddp-doctor executable) and python (the venv's Python).
set -euo pipefail

python="${INSTALL_PYTHON:-python3}"
base="${RUNNER_TEMP:-${TMPDIR:-/tmp}}"
venv="$base/ddp-doctor-venv"
output="${GITHUB_OUTPUT:-/dev/null}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "::error title=ddp-doctor::install-python '$python' does not run or is older than 3.10" >&2
    exit 2
fi
if ! "$python" -m venv "$venv"; then
    echo "::error title=ddp-doctor::'$python -m venv' failed (on Debian and Ubuntu: apt-get install python3-venv)" >&2
    exit 2
fi
if [ -x "$venv/bin/python" ]; then
    venv_python="$venv/bin/python"
    doctor="$venv/bin/ddp-doctor"
else  # Windows
    venv_python="$venv/Scripts/python.exe"
    doctor="$venv/Scripts/ddp-doctor.exe"
fi
"$venv_python" -m pip install --quiet --disable-pip-version-check "$GITHUB_ACTION_PATH"
"$doctor" --version
{
    echo "doctor=$doctor"
    echo "python=$venv_python"
} >>"$output"
