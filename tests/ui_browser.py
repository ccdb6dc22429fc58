"""Headless Chromium for the UI tests, and what a person does on the Prefect and MLflow pages.

The browser is Debian's ``chromium`` package (``make test`` installs it), driven by Playwright's
Python package through ``executable_path``; no browser build is ever downloaded. Chromium runs
with the flags this machine needs (root, no GPU, no network beyond 127.0.0.1) and a fresh
profile folder. Every helper acts through what the page shows (links, buttons, labels, text).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urljoin

import pytest

CHROMIUM_ENV = "XDISTILL_CHROMIUM"
CHROMIUM_FLAGS = [
    "--no-sandbox",  # the tests may run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # without these Chromium keeps calling Google's hosts, refused by a closed network
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Pages answer in a second on a quiet machine; on a loaded 2-core one the servers take minutes.
ACTION_TIMEOUT_MS = 180_000
VIEWPORT = {"width": 1280, "height": 900}
TALL_VIEWPORT = {"width": 1280, "height": 2600}  # a whole form in one screenshot


def chromium_path() -> str:
    """Debian's Chromium (or ``XDISTILL_CHROMIUM``); a clear failure naming the fix when absent."""
    candidates = [os.environ.get(CHROMIUM_ENV), shutil.which("chromium"), "/usr/bin/chromium"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        "the browser tests need Chromium: `make test` installs Debian's package (apt-get install chromium) "
        f"when it may; otherwise ask an administrator to install it, or set {CHROMIUM_ENV} to a Chromium "
        "binary; `pytest -m 'not browser'` runs everything else"
    )


@contextmanager
def browser_context(profile_dir: Path) -> Iterator[object]:
    """A Playwright browser context on Debian's Chromium with a fresh profile; closed on exit."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile_dir), executable_path=executable, headless=True, args=CHROMIUM_FLAGS, viewport=VIEWPORT
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


class Screens:
    """Numbered screenshots of every step (``XDISTILL_UI_SCREENSHOTS`` keeps them in a folder of your choice)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.taken: list[Path] = []

    def shot(self, page: object, name: str, *, whole: bool = False) -> Path:
        """Save what the page shows now as ``NN-name.png``; ``whole`` grows the window to fit a long form."""
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        if whole:
            page.set_viewport_size(TALL_VIEWPORT)
            page.wait_for_timeout(500)
        page.screenshot(path=str(path))
        if whole:
            page.set_viewport_size(VIEWPORT)
        self.taken.append(path)
        return path


# --- Prefect UI ----------------------------------------------------------------------------------


def shown(page: object, text: object, exact: bool = False) -> object:
    """The first element on view (not a hidden copy elsewhere in the page) whose text matches."""
    return page.get_by_text(text, exact=exact).filter(visible=True).first


def appears(locator: object, timeout_ms: float) -> bool:
    """Whether ``locator`` shows within ``timeout_ms`` (a page that has just loaded fills in its lists
    after its first paint, e.g. the flow-run page's "Waiting for logs...")."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    try:
        locator.first.wait_for(state="visible", timeout=timeout_ms)
    except PlaywrightTimeoutError:
        return False
    return True


def form_field(page: object, title: str) -> object:
    """A parameter of the Custom run form, by the title the form shows above it."""
    pattern = f"^{title}( \\\\(Optional\\\\))?$"  # titles are plain words
    return page.locator(
        f".schema-form-property:has(> .p-label__header .schema-form-property__label:text-matches('{pattern}'))"
    )


def choose(page: object, title: str, options: list[str]) -> None:
    """Pick options of a select field of the form."""
    pick(page, form_field(page, title), options)


def pick(page: object, select: object, options: list[str]) -> None:
    """Pick options of a Prefect select (opened from the keyboard: in headless Chromium a mouse click
    opens and closes it again)."""
    button = select.locator("button.p-select-button__control").first
    button.focus()
    button.press("ArrowDown")
    for option in options:
        page.get_by_role("option", name=option, exact=True).click()
    page.keyboard.press("Escape")


def newest_logs_first(page: object) -> None:
    """The Logs tab lists the newest lines first (the list shows only the lines in view)."""
    order = page.locator(".p-select", has_text=re.compile("(Oldest to newest|Newest to oldest)")).first
    if "Newest to oldest" not in order.inner_text():  # the page may remember the last choice
        pick(page, order, ["Newest to oldest"])


def fill(page: object, title: str, value: str) -> None:
    form_field(page, title).locator("input, textarea").first.fill(value)


def open_deployment(page: object, ui_url: str, flow: str, deployment: str) -> None:
    """Deployments page -> the row of ``flow`` named ``deployment``."""
    page.goto(f"{ui_url}/deployments")
    row = page.locator(f"tr:has(.flow-popover__link-name[title='{flow}'])")
    row.get_by_role("link", name=deployment, exact=True).click()
    page.get_by_role("button", name="Run", exact=True).wait_for()


def open_custom_run(page: object) -> str:
    """Run -> Custom run; returns the run name the form proposes."""
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Custom run").click()
    page.get_by_text("Parameters", exact=True).first.wait_for()
    return page.locator(".p-label", has_text="Run Name").locator("input").first.input_value()


def submit_and_open_run(page: object, run_name: str) -> str:
    """Submit the form, then open the new run from the deployment's page (else the Runs page); returns its id."""
    page.get_by_role("button", name="Submit").click()
    link = page.get_by_role("link", name=run_name, exact=True)
    if not appears(link, 60_000):
        # once (CI, 2026-11-27) the deployment page never listed the run it had just created, and
        # a rerun passed: the Runs page lists every flow run by name
        page.goto(urljoin(page.url, "/runs"))
    link.first.click()
    page.wait_for_url(re.compile(r"/runs/flow-run/"))
    return page.url.split("/runs/flow-run/", 1)[1].split("?", 1)[0]


def run_state(page: object) -> str:
    """The state badge of the flow-run page ("Running", "Completed", "Failed", ...)."""
    return page.locator(".page-heading-flow-run__meta .state-badge").first.inner_text().strip()


def open_tab(page: object, name: str) -> None:
    """A tab of a Prefect or MLflow page, by its label."""
    page.locator("[role=tablist]").get_by_text(name, exact=True).first.click()
    page.wait_for_timeout(1500)


def open_artifacts(page: object) -> None:
    """The flow run's Artifacts tab, in a window tall enough for the whole list: the tasks' artifact
    cards sit below the flow's and render only inside the window (as a person scrolls down)."""
    open_tab(page, "Artifacts")
    page.set_viewport_size(TALL_VIEWPORT)


def wait_for_final_state(page: object, timeout_s: float, while_running: object = None, every_s: float = 2.0) -> str:
    """Look at the flow-run page now and then until the run ends, as a person who checks back does;
    ``while_running(page)`` is called at each look while the run is Running. Between looks the tab
    shows a blank page: the flow-run page re-renders on every poll, and on two cores that rendering
    slowed the run it watches."""
    url = page.url
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if page.url != url:
            page.goto(url)
        state = run_state(page)
        if state in ("Completed", "Failed", "Crashed", "Cancelled"):
            page.wait_for_timeout(1500)  # the page fills in its details after the state badge
            return state
        if while_running is not None and state == "Running":
            while_running(page)
        page.goto("about:blank")
        time.sleep(every_s)
    page.goto(url)
    raise AssertionError(f"the flow run did not end within {timeout_s:.0f} s (page state: {run_state(page)})")


# --- MLflow UI -----------------------------------------------------------------------------------


def mlflow_model_training_view(page: object, ui_url: str) -> None:
    """MLflow 3 opens in its GenAI view: switch to "Model training" (runs, metrics, artifacts, registry)."""
    page.goto(f"{ui_url}/#/experiments")
    page.get_by_text("Model training", exact=True).click()
    close = page.get_by_role("button", name="Close")
    if close.count():  # the assistant side panel
        close.first.click()
