"""A headless Chromium driven over the DevTools protocol on a pipe (no package needed): open a page, collect its
JavaScript errors, evaluate expressions, take screenshots. Tests that use it skip, with the reason, where the
distribution's ``chromium`` is not installed (.ci/run installs it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium_or_skip() -> str:
    """The chromium binary, or skip the test with the reason."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless browser check needs Debian's chromium (apt-get install -y chromium; .ci/run installs it)")


class Browser:
    """One headless Chromium with one page; ``errors`` collects every uncaught exception and console error."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        binary = chromium_or_skip()
        self._profile = tempfile.mkdtemp(prefix="shardscope-chromium-")
        to_browser, self._commands = os.pipe()
        self._results, from_browser = os.pipe()

        def fds() -> None:  # the DevTools pipe: chromium reads commands on fd 3, writes answers on fd 4
            os.dup2(to_browser, 200)  # out of the way first: either end may itself be fd 3 or 4
            os.dup2(from_browser, 201)
            os.dup2(200, 3)
            os.dup2(201, 4)

        self._proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe",
                                       f"--window-size={width},{height}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds,
                                      pass_fds=(3, 4))
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id, self.errors = b"", 0, []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._results, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text"))

    def send(self, method: str, session: bool = False, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are noted)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._note(answer)

    def open(self, path: Path, settle_s: float = 2.0) -> None:
        """Load ``path`` and let its scripts run for ``settle_s``."""
        self.send("Page.navigate", session=True, url=path.resolve().as_uri())
        self.wait(settle_s)

    def wait(self, seconds: float) -> None:
        """Let the page run ``seconds``, noting its errors (a no-op evaluation polls the pipe)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.evaluate("0")
            time.sleep(0.1)

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """The first truthy value of ``expression``, polled until ``timeout``; TimeoutError after it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression[:80]}: still false after {timeout} s")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (awaited when it is a promise)."""
        result = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the viewport (or of the whole page) at ``path``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 16000), "scale": 1})
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", session=True, **params)["data"]))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._commands)
        os.close(self._results)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: JavaScript: the tables whose content is wider than what the page shows of them (clipped or scrolled away).
CLIPPED_TABLES = """[...document.querySelectorAll('table')].filter(t => {
    const box = t.parentElement.getBoundingClientRect();
    return t.scrollWidth > t.clientWidth + 2 || t.getBoundingClientRect().right > Math.max(box.right, innerWidth) + 2;
}).map(t => (t.innerText || '').slice(0, 80))"""
#: JavaScript: visible text lines that are Markdown the renderer left raw (a list item inline, backticks, ** marks).
RAW_MARKDOWN = r"""(() => {
    const out = [];
    for (const el of document.querySelectorAll('p, li, td, figcaption, em')) {
        const text = el.innerText || '';
        if (/(^|\s)- \*\*|`[^`]+`|\*\*[^*]+\*\*|(^|\n)#{1,6} /.test(text)) out.push(text.slice(0, 120));
    }
    return out;
})()"""


#: JavaScript: the names of the categories on the Snakemake report's start page.
SNAKEMAKE_CATEGORIES = """[...document.querySelectorAll('a')].map(a => a.innerText.trim())
    .filter(t => t && !['Workflow', 'Statistics', 'About', 'Results'].includes(t) && !t.includes('.'))"""


def snakemake_report_categories(report: Path, shots: Path) -> dict[str, list[str]]:
    """Open each category of a Snakemake report (page loaded afresh for each), press every result's buttons, and
    return each category's JavaScript errors; a screenshot of each category goes to ``shots``."""
    found: dict[str, list[str]] = {}
    with Browser() as browser:
        browser.open(report, 1)
        names = browser.wait_for(SNAKEMAKE_CATEGORIES)
        for name in names:
            browser.open(report, 1)
            link = f"[...document.querySelectorAll('a')].find(a => a.innerText.trim() === {name!r})"
            browser.wait_for(f"!!{link}")
            before = len(browser.errors)
            browser.evaluate(f"{link}.click()")
            browser.wait(1)
            browser.evaluate("[...document.querySelectorAll('a.transition-all')].forEach(a => a.click())")
            browser.wait(1)
            browser.screenshot(shots / f"snakemake-{name}.png")
            found[name] = browser.errors[before:]
    return found
