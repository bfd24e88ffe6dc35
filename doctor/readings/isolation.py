"""Readings of `run --isolate`'s pair rounds: why each bad node failed, the spread of pair
bandwidth, each pair's band from its nodes' stated link rates, and the exclude list in the
forms schedulers take.

The band is nominal (the interface's speed, or an IB/RoCE port's rate when the pairs ran
NCCL), so a pair is judged against it only when it is far under: under BAND_FLOOR_SOCKETS of it
over sockets (gloo's pair test is one TCP stream with 512 KiB messages, which reaches only a
part of a fast NIC's rate), under BAND_FLOOR_FABRIC of it over the fabric. It catches what the
median cannot: every pair slow alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ddp_doctor.facts.cluster import IsolationFacts, NodeLink, PairBand, PairTest
from ddp_doctor.facts.runs import host_list


def pair_failure(pair: PairTest, isolation: IsolationFacts) -> str | None:
    """Why a pair failed, or None when it passed."""
    if not pair.connected:
        return "cannot connect" + (f" ({pair.error})" if pair.error else "")
    if pair.exact is False:
        return "wrong all-reduce result"
    reference = isolation.median_gbps
    if pair.gbps is not None and reference and pair.gbps < isolation.slow_below * reference:
        share = 100 * pair.gbps / reference
        return f"bandwidth {share:.2g}% of the median ({pair.gbps:.3g} GB/s, {reference:.3g} GB/s)"
    return None


BAND_FLOOR_SOCKETS = 0.02
BAND_FLOOR_FABRIC = 0.1


def pair_band(
    nodes: tuple[int, int], links: Mapping[int, NodeLink], fabric: bool
) -> PairBand | None:
    """The slower of the two nodes' stated rates, GB/s; None unless both are known."""
    rates = [_rate(node, links.get(node), fabric) for node in nodes]
    known = [rate for rate in rates if rate is not None]
    if len(known) < 2:
        return None
    gbps, basis = min(known)
    return PairBand(nodes, round(gbps, 4), basis)


def _rate(node: int, link: NodeLink | None, fabric: bool) -> tuple[float, str] | None:
    if link is None:
        return None
    if fabric and link.fabric_gbit:
        return link.fabric_gbit / 8, f"node {node}'s IB/RoCE port at {link.fabric_gbit:g} Gbit/s"
    if link.mbps:
        return link.mbps / 8000, f"node {node}'s {link.interface} at {link.mbps} Mbit/s"
    return None


def far_under(
    pairs: Sequence[PairTest], bands: Sequence[PairBand], floor: float
) -> tuple[tuple[int, int], ...]:
    """Connected pairs whose bandwidth is under `floor` of their band."""
    band_of = {band.nodes: band for band in bands}
    return tuple(
        pair.nodes
        for pair in pairs
        if pair.connected
        and pair.gbps is not None
        and pair.nodes in band_of
        and pair.gbps < floor * band_of[pair.nodes].gbps
    )


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
