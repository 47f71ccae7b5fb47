"""The line a Python benchmark prints for each of its targets, as bench/common.sh's `target`
does, for bench/all.sh to collect: "TARGET <name>: <measured> (<op> <threshold>) met"."""

from __future__ import annotations


def target(name: str, measured: float, op: str, threshold: float, unit: str = "x") -> bool:
    """Prints the line; True when the target is met (``op`` is ">=" or "<=")."""
    met = measured >= threshold if op == ">=" else measured <= threshold
    print(
        f"TARGET {name}: {measured:.2f}{unit} ({op} {threshold:g}{unit}) "
        f"{'met' if met else 'NOT MET'}"
    )
    return met


def not_measured(name: str, reason: str) -> None:
    print(f"TARGET {name}: not measured: {reason}")
