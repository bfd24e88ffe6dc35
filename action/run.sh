#!/usr/bin/env bash
# The GitHub action's step (action.yml): runs one ddp-doctor command and hands its results to
# GitHub: check -> SARIF for code scanning plus annotations; run, logs, diagnose -> the
# Markdown report in the job summary. Inputs come as variables, never spliced into code:
#   DDP_DOCTOR_COMMAND  the command and its arguments, e.g. "check src/" or "run --timeout 300"
#   DDP_DOCTOR_FAIL_ON  info | warning | error
# Writes ddp-doctor.sarif or ddp-doctor.md in the working folder, and exit-code and
# sarif-file to $GITHUB_OUTPUT. Exits 0: the action's last step applies the exit code, so the
# SARIF upload and the summary happen first.
set -uo pipefail

read -r -a args <<<"${DDP_DOCTOR_COMMAND:-check .}"
fail_on="${DDP_DOCTOR_FAIL_ON:-error}"
output="${GITHUB_OUTPUT:-/dev/null}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"

case "${args[0]:-}" in
check)
    ddp-doctor "${args[@]}" --fail-on "$fail_on" --format sarif --output ddp-doctor.sarif
    code=$?
    ddp-doctor "${args[@]}" --fail-on "$fail_on" --format github || true
    echo "sarif-file=ddp-doctor.sarif" >>"$output"
    ;;
run | logs | diagnose)
    ddp-doctor "${args[@]}" --fail-on "$fail_on" --format markdown --output ddp-doctor.md
    code=$?
    if [ -f ddp-doctor.md ]; then
        cat ddp-doctor.md >>"$summary"
    fi
    ;;
*)
    echo "ddp-doctor action: command must start with check, run, logs or diagnose" >&2
    code=2
    ;;
esac
echo "exit-code=$code" >>"$output"
exit 0
