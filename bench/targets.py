"""The line a Python benchmark prints for each of its targets, as bench/common.sh's `target`
does, for bench/all.sh to collect: "TARGET <name>: <measured> (<op> <threshold>) met"."""

from __future__ import annotations


def target(
    name: str, measured: float, op: str, threshold: float, unit: str = "x", why_not: str = ""
) -> bool:
    """Prints the line; True when the target is met (``op`` is ">=" or "<="). ``why_not``, when
    given, follows a target that is not met: what keeps this machine from it."""
    met = measured >= threshold if op == ">=" else measured <= threshold
    print(
        f"TARGET {name}: {measured:.2f}{unit} ({op} {threshold:g}{unit}) "
        f"{'met' if met else 'NOT MET'}{'' if met or not why_not else ': ' + why_not}"
    )
    return met


def not_measured(name: str, reason: str) -> None:
    print(f"TARGET {name}: not measured: {reason}")
