"""The planner page (`kvtier plan --html`) in headless Chromium: moving its controls shows what
`kvtier crossover` and `kvtier cost` print for the same inputs."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import Page, assert_not_blank
from conftest import kvtier_cli_path


def cli(*args: str) -> dict[str, Any]:
    out = subprocess.run([kvtier_cli_path(), *args, "--json"], check=True, capture_output=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def seconds(shown: str) -> float:
    number, unit = shown.split()
    return float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def close(shown: float, expected: float) -> bool:
    # The page shows 4 significant digits of the planner's value.
    return abs(shown - expected) <= 1e-3 * abs(expected)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    html = tmp_path / "plan.html"
    subprocess.run([kvtier_cli_path(), "plan", "--html", str(html), "--tp", "8"], check=True)
    p = Page(html.as_uri(), tmp_path / "chromium")
    p.wait_for("document.body.dataset.ready", "the planner's first figures")
    yield p
    p.close()


def shown(page: Page) -> dict[str, Any]:
    return {
        "model": page.evaluate("document.getElementById('model').value"),
        "gpu": page.evaluate("document.getElementById('gpu').value"),
        "link": page.evaluate("document.getElementById('link').value"),
        "tokens": page.text("tokens-value"),
        "hit": page.text("hit-value"),
        "crossover": page.text("crossover"),
        "recompute": seconds(page.text("recompute")),
        "reload": seconds(page.text("reload")),
        "speedup": float(page.text("speedup").rstrip("x")),
        "usd_cold": float(page.text("usd-cold").lstrip("$")),
        "usd_warm": float(page.text("usd-warm").lstrip("$")),
        "ttft_cold": seconds(page.text("ttft-cold")),
        "ttft_warm": seconds(page.text("ttft-warm")),
    }


def assert_matches_cli(s: dict[str, Any], tokens: int, hit_rate: float) -> None:
    common = ["--model", s["model"], "--gpu", s["gpu"], "--link", s["link"], "--tp", "8"]
    crossover = cli("crossover", *common, "--tokens", str(tokens))
    cost = cli("cost", *common, "--tokens", str(tokens), "--hit-rate", str(hit_rate))
    assert s["crossover"] == f"{crossover['crossover_tokens']} tokens"
    assert close(s["recompute"], crossover["recompute_seconds"]), (s, crossover)
    assert close(s["reload"], crossover["reload_seconds"]), (s, crossover)
    assert abs(s["speedup"] - crossover["speedup"]) <= 5e-3 * crossover["speedup"]
    assert close(s["usd_cold"], cost["without_cache"]["usd_per_million_prompt_tokens"]), (s, cost)
    assert close(s["usd_warm"], cost["with_cache"]["usd_per_million_prompt_tokens"]), (s, cost)
    assert close(s["ttft_cold"], cost["without_cache"]["ttft_seconds"]), (s, cost)
    assert close(s["ttft_warm"], cost["with_cache"]["ttft_seconds"]), (s, cost)


def test_moving_the_controls_shows_what_the_cli_prints(page: Page, tmp_path: Path) -> None:
    first = shown(page)
    assert (first["model"], first["gpu"], first["link"]) == ("llama-3.1-8b", "a100", "pcie-gen4")
    assert (first["tokens"], first["hit"]) == ("32K tokens", "80%")
    assert_matches_cli(first, 32768, 0.8)

    # The keyboard moves each control as a user would: the next model, GPU and link, the
    # prompt slider two notches up (128K tokens), the hit-rate slider three down (50%).
    page.press("model", "ArrowDown")
    page.press("gpu", "ArrowDown")
    page.press("link", "ArrowDown", times=5)
    page.press("tokens", "ArrowRight", times=2)
    page.press("hit", "ArrowLeft", times=3)
    moved = shown(page)
    assert (moved["model"], moved["gpu"], moved["link"]) == ("llama-3.1-70b", "h100", "400gbe")
    assert (moved["tokens"], moved["hit"]) == ("128K tokens", "50%")
    assert_matches_cli(moved, 131072, 0.5)
    assert moved["recompute"] > first["recompute"] and moved["usd_warm"] != first["usd_warm"]

    # Both charts are drawn: a screenshot of the page is not blank, and each chart has lines.
    assert page.evaluate("document.querySelectorAll('#chart-crossover polyline').length") == 2
    assert page.evaluate("document.querySelectorAll('#chart-cost polyline').length") == 1
    assert_not_blank(page.screenshot(tmp_path / "plan.png"))


def test_a_gpu_that_cannot_run_the_settings_says_so(tmp_path: Path) -> None:
    html = tmp_path / "plan.html"
    subprocess.run([kvtier_cli_path(), "plan", "--html", str(html), "--fp8-compute"], check=True)
    p = Page(html.as_uri(), tmp_path / "chromium")
    try:
        p.wait_for("document.body.dataset.ready", "the planner's first figures")
        # The first GPU is the A100, which has no FP8 tensor cores.
        assert p.evaluate("document.getElementById('gpu').value") == "a100"
        assert re.search("cannot run", p.text("crossover"))
        p.press("gpu", "ArrowDown")
        assert p.text("crossover").endswith("tokens")
    finally:
        p.close()


def test_bad_settings_are_refused_with_the_reason(tmp_path: Path) -> None:
    r = subprocess.run(
        [kvtier_cli_path(), "plan", "--html", str(tmp_path / "p.html"), "--dtype", "int3"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "int3" in r.stderr
    assert not (tmp_path / "p.html").exists()
