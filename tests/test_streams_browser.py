"""Run streams in a real browser (Debian's Chromium through Playwright): the docs' page, served from
another origin, reads a run's stream with a stream token through EventSource; an origin not listed is
refused; the dashboard's run page shows the stream live."""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from pydantic import BaseModel

import lockgate as lg

from .dashboard_site import Site

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Ask(BaseModel):
    words: int = 12


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="talk")
    async def talk(ctx: lg.Context, p: Ask) -> int:
        async def generate() -> int:
            for i in range(p.words):
                await ctx.stream(f"word{i} ")
                await asyncio.sleep(0.05)
            return p.words

        return int(await ctx.step("generate", generate))

    return app


class Pages:
    """``examples/`` served over HTTP on a port of its own: another origin than the API's."""

    def __init__(self) -> None:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
        handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def pages() -> Iterator[Pages]:
    served = Pages()
    yield served
    served.close()


@pytest.fixture(scope="module")
def site(pages: Pages) -> Iterator[Site]:
    with Site(make_app(), stream_origins=[f"http://127.0.0.1:{pages.port}"]) as live:
        yield live


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        found = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield found
        found.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    found = context.new_page()
    found.set_default_timeout(15_000)
    yield found
    context.close()


def _start(site: Site, words: int) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        handle = await site.client.start("talk", {"words": words})
        assert handle.run_id is not None
        return handle.run_id, await site.client.stream_token(handle.run_id, ttl="5m", topics=["default"])

    return site.call(go)


def test_a_page_of_another_origin_reads_the_stream_with_a_token(site: Site, pages: Pages, page: Page) -> None:
    run_id, token = _start(site, 12)
    query = urlencode({"api": site.url, "run": run_id, "token": token})
    page.goto(f"http://127.0.0.1:{pages.port}/streams_page.html?{query}")
    expect(page.locator("#answer")).to_contain_text("word0 ")  # live: before the run ends
    expect(page.locator("#status")).to_have_text("succeeded")
    assert page.locator("#answer").text_content() == "".join(f"word{i} " for i in range(12))


def test_an_origin_not_listed_is_refused(site: Site, pages: Pages, page: Page) -> None:
    run_id, token = _start(site, 2)
    query = urlencode({"api": site.url, "run": run_id, "token": token})
    page.goto(f"http://localhost:{pages.port}/streams_page.html?{query}")  # same page, an origin not listed
    expect(page.locator("#status")).to_have_text("refused")
    assert page.locator("#answer").text_content() == ""


def test_the_run_page_shows_the_stream_live(site: Site, page: Page) -> None:
    run_id, _ = _start(site, 30)
    page.goto(f"{site.url}/ui/runs/{run_id}")
    expect(page.locator("#run-stream")).to_contain_text("word0 ")
    expect(page.locator("[data-stream-state]")).to_have_text("(succeeded)", timeout=20_000)
    assert page.locator("#run-stream").text_content() == "".join(f"word{i} " for i in range(30))
