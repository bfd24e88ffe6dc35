#!/usr/bin/env bash
# The action's second step (action.yml): runs one ddp-doctor command, by the path the install
# step gave, and hands its results to GitHub: check -> SARIF for code scanning, annotations
# and a summary, all from one run; run, trace, logs, diagnose -> the Markdown report in the
# job summary. Inputs come as variables, never spliced into code:
#   DDP_DOCTOR_BIN       the installed ddp-doctor;  DDP_DOCTOR_VENV_PYTHON  its Python
#   DDP_DOCTOR_COMMAND   the command and space-separated arguments, e.g. "check src/"
#   DDP_DOCTOR_ARGS      more arguments, one per line (spaces inside a line stay)
#   DDP_DOCTOR_FAIL_ON   info | warning | error
#   DDP_DOCTOR_PYTHON    the training Python for run and trace (--python), or empty
# Writes ddp-doctor.sarif or ddp-doctor.md in the working folder; exit-code, report-file and
# (when the file exists) sarif-file to $GITHUB_OUTPUT. Exits 0: the action's last step
# applies the exit code, so the SARIF upload and the summary happen first.
set -uo pipefail

doctor="${DDP_DOCTOR_BIN:?the install step gives the ddp-doctor to run}"
venv_python="${DDP_DOCTOR_VENV_PYTHON:-python3}"
fail_on="${DDP_DOCTOR_FAIL_ON:-error}"
training_python="${DDP_DOCTOR_PYTHON:-}"
output="${GITHUB_OUTPUT:-/dev/null}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

read -r -a words <<<"${DDP_DOCTOR_COMMAND:-check .}"
while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    if [ -n "$line" ]; then
        words+=("$line")
    fi
done <<<"${DDP_DOCTOR_ARGS:-}"

command="${words[0]:-}"
rest=("${words[@]:1}")
options=(--fail-on "$fail_on")

case "$command" in
check)
    "$doctor" check "${options[@]}" --format sarif --output ddp-doctor.sarif "${rest[@]}"
    code=$?
    if [ -f ddp-doctor.sarif ]; then
        "$venv_python" "$here/summary.py" ddp-doctor.sarif "$code" "$summary"
        echo "sarif-file=ddp-doctor.sarif" >>"$output"
        echo "report-file=ddp-doctor.sarif" >>"$output"
    else
        echo "ddp-doctor check could not run (exit code $code); its error is in the log." >>"$summary"
    fi
    ;;
run | trace | logs | diagnose)
    if [ -n "$training_python" ] && [[ "$command" == run || "$command" == trace ]]; then
        if [[ " ${rest[*]} " != *" --python "* ]]; then
            options+=(--python "$training_python")
        fi
    fi
    "$doctor" "$command" "${options[@]}" --format markdown --output ddp-doctor.md "${rest[@]}"
    code=$?
    if [ -f ddp-doctor.md ]; then
        cat ddp-doctor.md >>"$summary"
        echo "report-file=ddp-doctor.md" >>"$output"
    else
        echo "ddp-doctor $command could not run (exit code $code); its error is in the log." >>"$summary"
    fi
    ;;
*)
    echo "::error title=ddp-doctor::command must be check, run, trace, logs or diagnose, not '$command'" >&2
    code=2
    ;;
esac
echo "exit-code=$code" >>"$output"
exit 0
