"""Headless Chromium for the browser tests: Debian's /usr/bin/chromium driven by Playwright.

``make setup`` installs Debian's ``chromium`` (apt-get) and the Python ``playwright`` package (the
``dev`` extra). Playwright's own browser download (``playwright install``) is never used: it cannot
reach its servers from here. Chromium gets the flags that keep it off the network; without them it
keeps opening connections that the closed network refuses. Playwright gives every launch a fresh,
empty profile folder (its ``--user-data-dir``).

Screenshots and other artifacts go to ``$METACAN_TEST_ARTIFACTS`` or ``<repo>/test-artifacts/``
(ignored by git, never committed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
#: --headless is Playwright's (headless=True); --user-data-dir too (a new empty folder per launch).
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def artifacts_dir() -> Path:
    """Where tests save screenshots (created): ``$METACAN_TEST_ARTIFACTS`` or ``<repo>/test-artifacts``."""
    path = Path(os.environ.get("METACAN_TEST_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch_chromium(playwright):
    """A headless Chromium from /usr/bin/chromium; fails (never skips) when it is not installed."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} not found: the browser tests need Debian's chromium package; `make setup` installs it "
            f"(apt-get install chromium)",
            pytrace=False,
        )
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=list(CHROMIUM_FLAGS))


def start_playwright():
    """``sync_playwright().start()``; fails with what to install when the package is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "the Python package playwright is not installed: `make setup` installs it (the dev extra of pyproject.toml)",
            pytrace=False,
        )
    return sync_playwright().start()


@dataclass
class PageWatch:
    """What a page did that a test may forbid: dialogs opened, console errors, uncaught errors."""

    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def attach(self, page) -> PageWatch:
        def on_dialog(dialog):
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        return self
