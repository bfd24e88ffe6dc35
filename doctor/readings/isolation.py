"""Readings of `run --isolate`'s pair rounds: why each bad node failed, the spread of pair
bandwidth, and the exclude list in the forms schedulers take."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ddp_doctor.facts.cluster import IsolationFacts, PairTest
from ddp_doctor.facts.runs import host_list


def pair_failure(pair: PairTest, isolation: IsolationFacts) -> str | None:
    """Why a pair failed, or None when it passed."""
    if not pair.connected:
        return "cannot connect" + (f" ({pair.error})" if pair.error else "")
    if pair.exact is False:
        return "wrong all-reduce result"
    reference = isolation.expected_gbps or isolation.median_gbps
    if pair.gbps is not None and reference and pair.gbps < isolation.slow_below * reference:
        basis = "the expected band" if isolation.expected_gbps else "the median"
        share = 100 * pair.gbps / reference
        return f"bandwidth {share:.2g}% of {basis} ({pair.gbps:.3g} GB/s, {reference:.3g} GB/s)"
    return None


def why_bad(node: int, isolation: IsolationFacts) -> str:
    """The failure of the bad node beside a node that passed elsewhere (the telling one)."""
    bad = set(isolation.bad)
    reasons = []
    for pair in isolation.pairs:
        if node in pair.nodes:
            partner = pair.nodes[0] if pair.nodes[1] == node else pair.nodes[1]
            reason = pair_failure(pair, isolation)
            if reason and partner not in bad:
                reasons.append(reason)
    return reasons[-1] if reasons else "failed its pair tests"


def spread(isolation: IsolationFacts) -> tuple[float, float, float] | None:
    """(lowest, median, highest) pair bandwidth, GB/s."""
    measured = [p.gbps for p in isolation.pairs if p.gbps is not None]
    if not measured:
        return None
    return min(measured), statistics.median(measured), max(measured)


def exclude_forms(hosts: Sequence[str]) -> dict[str, str]:
    """The bad hosts as srun, a hostfile filter and Kubernetes take them."""
    listed = host_list(list(hosts))
    patterns = " ".join(f"-e {host}" for host in hosts)
    return {
        "srun": f"--exclude={listed}",
        "hostfile": f"grep -v -x {patterns} hostfile > hostfile.good",
        "kubernetes": f"kubectl taint nodes {' '.join(hosts)} ddp-doctor/bad-node=true:NoSchedule",
    }


def hosts_of(nodes: Sequence[int], names: Mapping[int, str | None]) -> list[str]:
    return [names.get(node) or f"node{node}" for node in nodes]
