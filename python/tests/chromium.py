"""Headless Chromium driven over the DevTools protocol, for tests of kvtier's web pages (the
dashboard at kvtierd's ``/``, the planner page): load a page, press keys on its controls as a
user would, read what it shows, take a screenshot.

Chromium is the Debian package (scripts/deps.sh installs it); the protocol runs over a
WebSocket with aiohttp. Waits poll a condition in the page and are bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest

DEADLINE = 30.0
KEY_CODES = {
    "ArrowRight": 39,
    "ArrowLeft": 37,
    "ArrowDown": 40,
    "ArrowUp": 38,
    "Home": 36,
    "End": 35,
}


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no chromium on PATH: scripts/deps.sh installs it (Debian package chromium)")


class Page:
    """One Chromium with one tab open at ``url``."""

    def __init__(self, url: str, profile: Path) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        # Chromium's own log, quoted when it does not start.
        self.log = profile.parent / f"{profile.name}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    chromium_path(),
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--window-size=1200,1000",
                    "--remote-debugging-port=0",
                    f"--user-data-dir={profile}",
                    url,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.loop = asyncio.new_event_loop()
        self.next_id = 0
        port_file = profile / "DevToolsActivePort"
        began = time.monotonic()
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None:
                self._fail_start(f"exited with {self.proc.returncode}", began)
            if time.monotonic() - began > DEADLINE:
                self._fail_start("did not open its DevTools port", began)
            time.sleep(0.01)  # Polling for the port file, bounded by DEADLINE.
        port = int(port_file.read_text().split("\n")[0])
        self.loop.run_until_complete(self._connect(port))

    def _fail_start(self, what: str, began: float) -> NoReturn:
        """Fails the test with where the browser process was waiting and the end of its log."""
        pid = self.proc.pid
        waits = []
        for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                comm = (task / "comm").read_text().strip()
                waits.append(f"{comm}:{(task / 'wchan').read_text().strip() or '-'}")
            except OSError:
                continue  # The thread ended meanwhile.
        self.proc.kill()
        self.proc.wait()
        self.loop.close()
        tail = self.log.read_text(errors="replace").splitlines()[-20:]
        pytest.fail(
            f"chromium {what} after {time.monotonic() - began:.1f} s; its threads were waiting "
            f"in {' '.join(waits) or '(none left)'}; the end of its log ({self.log}):\n"
            + "\n".join(tail)
        )

    async def _connect(self, port: int) -> None:
        self.session = aiohttp.ClientSession()
        deadline = time.monotonic() + DEADLINE
        while True:
            async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [t for t in await r.json() if t["type"] == "page"]
            if pages:
                break
            assert time.monotonic() < deadline, "chromium opened no page"
            await asyncio.sleep(0.01)  # Polling for the tab, bounded by DEADLINE.
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        call_id = self.next_id
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads((await self.ws.receive(timeout=DEADLINE)).data)
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(method, params))

    def evaluate(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """Polls ``expression`` in the page until it is truthy; fails after DEADLINE."""
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None  # The page is still loading.
            if value:
                return value
            assert time.monotonic() < deadline, f"page never showed {what}"
            time.sleep(0.02)  # Polling the page, bounded by DEADLINE.

    def text(self, element_id: str) -> str:
        return str(self.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent"))

    def press(self, element_id: str, key: str, times: int = 1) -> None:
        """Focuses the control and presses ``key`` on it, as the keyboard does."""
        self.evaluate(f"document.getElementById({json.dumps(element_id)}).focus()")
        code = KEY_CODES[key]
        for _ in range(times):
            for kind in ("keyDown", "keyUp"):
                self.call(
                    "Input.dispatchKeyEvent",
                    type=kind,
                    key=key,
                    code=key,
                    windowsVirtualKeyCode=code,
                    nativeVirtualKeyCode=code,
                )

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        async def shut() -> None:
            await self.ws.close()
            await self.session.close()

        self.loop.run_until_complete(shut())
        self.loop.close()
        self.proc.terminate()
        self.proc.wait(timeout=DEADLINE)


def assert_not_blank(png: Path) -> None:
    """The repository's blank-screenshot check (tests/planning_png_check.py)."""
    checker = Path(__file__).resolve().parents[2] / "tests/planning_png_check.py"
    r = subprocess.run(["python3", str(checker), str(png)], capture_output=True, text=True)
    assert r.returncode == 0, f"screenshot {png} is blank: {r.stdout}{r.stderr}"
