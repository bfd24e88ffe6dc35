"""Findings from probe results: the facts rules, then the passes that need what they found.

The passes run in this order, each given the findings so far:
1. the facts rules (every `@rule` judged on "facts"), each guarded: a rule that raises is DDP903;
2. the job's output (`rules.job_output`): what the job printed that no facts rule explained;
3. the traced run (`rules.trace_runtime`), only for `trace`: the codes the user's run confirmed,
   then DDP908 where it did not succeed and no error says why (`rules.trace_outcome`);
4. the other nodes (`run.other_nodes`), only for node 0 of a multi-node run: every other node's
   findings, judged by this same function, which is handed to that pass rather than imported;
5. the attached job (`rules.attach_hang`), only for `attach`: its verdict as DDP302, DDP304 or
   DDP307, the codes the job and the trace use for the same causes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ddp_doctor.engine import describe_crash
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Finding, ProbeResult, sort_findings
from ddp_doctor.registry import Hit, Selector, rules_judged, spec_for

# A pass: the facts, the findings so far and the selection -> the findings after it.
FindingPass = Callable[[FactSet, list[Finding], Selector], list[Finding]]


def judge(results: Iterable[ProbeResult], selector: Selector | None = None) -> list[Finding]:
    """Every finding the results call for, selected and sorted."""
    selector = selector or Selector()
    facts = FactSet.of(tuple(results))
    findings = facts_rule_findings(facts, selector)
    for finding_pass in passes_for(facts):
        findings = finding_pass(facts, findings, selector)
    return selector.filter(sort_findings(findings))


def facts_rule_findings(facts: FactSet, selector: Selector) -> list[Finding]:
    """Every selected facts rule; a rule that raises becomes a DDP903 finding."""
    findings: list[Finding] = []
    for spec in rules_judged("facts"):
        if not selector.allows(spec.code):
            continue
        try:
            findings.extend(spec.run(facts))
        except Exception as error:
            findings.append(rule_crashed(f"{spec.code} ({spec.name})", spec.code, error))
    return findings


def passes_for(facts: FactSet) -> list[FindingPass]:
    """The passes after the facts rules, for what these facts hold (modules load lazily)."""
    passes: list[FindingPass] = [_job_output]
    if facts.trace is not None:
        passes.append(_traced_run)
    if facts.cluster is not None:
        passes.append(_other_nodes)
    if facts.attach is not None:
        passes.append(_attached)
    return passes


def _job_output(facts: FactSet, findings: list[Finding], selector: Selector) -> list[Finding]:
    from ddp_doctor.rules.job_output import job_output_findings

    return [*findings, *job_output_findings(facts, findings)]


def _traced_run(facts: FactSet, findings: list[Finding], selector: Selector) -> list[Finding]:
    from ddp_doctor.rules.trace_outcome import unfinished_run_findings
    from ddp_doctor.rules.trace_runtime import runtime_findings

    try:
        findings = [*findings, *runtime_findings(facts, findings)]
    except Exception as error:
        findings = [*findings, rule_crashed("for the traced run", "trace", error)]
    assert facts.trace is not None  # passes_for adds this pass only then
    return [*findings, *unfinished_run_findings(facts.trace, findings)]


def _other_nodes(facts: FactSet, findings: list[Finding], selector: Selector) -> list[Finding]:
    from ddp_doctor.run.other_nodes import with_other_nodes

    return with_other_nodes(facts, findings, judge, selector)


def _attached(facts: FactSet, findings: list[Finding], selector: Selector) -> list[Finding]:
    from ddp_doctor.rules.attach_hang import attach_hang_findings

    try:
        return [*findings, *attach_hang_findings(facts)]
    except Exception as error:
        return [*findings, rule_crashed("for the attached job", "attach", error)]


def rule_crashed(what: str, rule: str, error: Exception) -> Finding:
    crash = Hit(f"rule {what} crashed: {describe_crash(error)}", evidence={"rule": rule})
    return spec_for("DDP903").finding(crash)
