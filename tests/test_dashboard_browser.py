"""The dashboard in a real browser (Debian's Chromium driven by Playwright) against a live engine.

One browser for the module; each test opens its own page. Screenshots of every page go to
``tests/artifacts/`` for a person to look at; with ``LOCKGATE_DOCS_SCREENSHOTS=1`` they also
replace the documentation's images under ``docs/images/``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from pydantic import BaseModel

import lockgate as lg
from lockgate.records import RunInfo

from .dashboard_site import Site, wait_until

pytestmark = pytest.mark.slow  # a real browser and a live server: seconds per test

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
DOC_IMAGES = ROOT / "docs" / "images"

if not Path(CHROMIUM).exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{CHROMIUM} is missing: scripts/test installs it (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)


class Order(BaseModel):
    id: str = "o1"
    note: str = ""


class Edit(BaseModel):
    row: str
    n: int = 0


class Go(BaseModel):
    ok: bool = True


def prepare(order_id: str) -> str:
    return f"prepared {order_id}"


_flaky_calls: dict[str, int] = {}


def flaky(order_id: str) -> str:
    _flaky_calls[order_id] = _flaky_calls.get(order_id, 0) + 1
    if _flaky_calls[order_id] < 3:
        raise ConnectionError(f"carrier busy (call {_flaky_calls[order_id]})")
    return "shipped"


async def _hold(ctx: lg.Context, p: Order) -> str:
    await ctx.step("prepare", prepare, p.id)
    await ctx.wait_for_signal("go", Go)
    return "released"


async def _ship(ctx: lg.Context, p: Order) -> str:
    await ctx.step("prepare", prepare, p.id)
    return await ctx.step("ship", flaky, p.id, retry=lg.Retry(max_attempts=3, base_delay=0.05, strategy="fixed"))


async def _echo(ctx: lg.Context, p: Order) -> dict[str, str]:
    return {"note": p.note}


async def _edit(ctx: lg.Context, p: Edit) -> int:
    return p.n


def row_key(p: Edit) -> str:
    return p.row


class OrderKey(BaseModel):
    order_id: str


class Paid(BaseModel):
    total: float


def make_app() -> lg.App:
    app = lg.App()
    app.workflow(name="hold")(_hold)
    app.workflow(name="ship")(_ship)
    app.workflow(name="echo")(_echo)
    app.workflow(name="edits", debounce=lg.Debounce(period="300ms", key=row_key))(_edit)
    app.workflow(name="printer", concurrency=lg.Concurrency(limit=1))(_hold)
    app.workflow(name="nightly", schedule=lg.Schedule(cron="0 3 * * *", payload={"id": "nightly"}))(_echo)
    paid = app.event("order.paid", key=OrderKey, payload=Paid)
    app.trigger(on=paid, workflow="echo", payload=lambda ev: {"id": ev.key.order_id, "note": f"paid {ev.data.total}"})
    return app


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with Site(make_app()) as live:
        yield live


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        found = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield found
        found.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    found = context.new_page()
    found.set_default_timeout(10_000)
    yield found
    context.close()


def shot(page: Page, name: str) -> None:
    """A screenshot of the page for a person, and for the docs when asked."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    width, height = page.evaluate("[document.documentElement.scrollWidth, document.body.scrollHeight + 8]")
    clip = {"x": 0, "y": 0, "width": width, "height": min(height, 900)}  # the content, not the empty window
    page.screenshot(path=str(path), full_page=True, clip=clip)
    if os.environ.get("LOCKGATE_DOCS_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_IMAGES / f"dashboard-{name}.png")


def run_of(site: Site, run_id: str) -> RunInfo:
    return site.call(lambda: site.client.inspector.run(run_id))


def wait_status(site: Site, run_id: str, *statuses: str) -> None:
    async def reached() -> bool:
        return (await site.client.inspector.run(run_id)).status in statuses

    wait_until(site, reached)


def test_runs_list_filter_follow_a_run_and_cancel_it_live(site: Site, page: Page) -> None:
    shipped = site.call(lambda: site.client.start("ship", Order(id="s1")))
    held = site.call(lambda: site.client.start("hold", Order(id="h1")))
    for n in range(3):
        site.call(lambda n=n: site.client.start("echo", Order(id=f"e{n}")))
    assert shipped.run_id and held.run_id
    wait_status(site, shipped.run_id, "succeeded")

    async def waiting() -> bool:
        return (await site.client.inspector.run(held.run_id)).waiting_on is not None

    wait_until(site, waiting)

    page.goto(f"{site.url}/ui/runs")
    expect(page.locator("table.runs tbody tr")).to_have_count(5)
    shot(page, "runs")
    late = site.call(lambda: site.client.start("echo", Order(id="late")))
    expect(page.locator("table.runs tbody tr").first).to_contain_text(str(late.run_id))  # appears live
    expect(page.locator("table.runs tbody tr")).to_have_count(6)

    # filter: the URL mirrors it, so the link reproduces the view
    page.select_option("#f-status", "running")
    page.fill("#f-workflow", "hold")
    page.press("#f-workflow", "Enter")
    expect(page).to_have_url(re.compile(r"workflow=hold"))
    expect(page).to_have_url(re.compile(r"status=running"))
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("hold")

    # a second tab follows the run and cancels it; the list in the first one sees it live
    other = page.context.new_page()
    other.goto(f"{site.url}/ui/runs")
    other.click(f'a[href="/ui/runs/{shipped.run_id}"]')
    expect(other.locator("h1")).to_contain_text(shipped.run_id)
    lanes = other.locator(".lane")
    expect(lanes).to_have_count(2)  # prepare, ship
    expect(other.locator(".lane").nth(1).locator(".bar-failed")).to_have_count(2)  # two failed attempts
    expect(other.locator(".lane").nth(1).locator(".bar-wait")).to_have_count(2)  # with the retry gaps
    expect(other.locator(".lane").nth(1).locator(".bar-completed")).to_have_count(1)
    shot(other, "run")

    other.goto(f"{site.url}/ui/runs/{held.run_id}")
    expect(other.locator('[data-verb="resume"]')).to_have_attribute("aria-disabled", "true")
    other.click('a[data-verb="cancel"]')
    expect(other.locator("h1")).to_contain_text("Cancel")
    other.fill("#c-reason", "customer asked")
    shot(other, "confirm")
    other.click("#confirm")
    expect(other.locator("#run-live .run-head .chip")).to_have_text("cancelled")
    assert run_of(site, held.run_id).status == "cancelled"
    # the filtered list (running hold runs) empties without a reload
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("No run matches")
    # and the run's own page, open before, shows the refusal of a second cancel
    other.goto(f"{site.url}/ui/runs/{held.run_id}/do/cancel")
    other.click("#confirm")
    expect(other.locator("#refusal")).to_contain_text("RunNotEligible")
    other.close()


def test_a_run_page_updates_live(site: Site, page: Page) -> None:
    held = site.call(lambda: site.client.start("hold", Order(id="h2")))
    assert held.run_id
    page.goto(f"{site.url}/ui/runs/{held.run_id}")
    chip = page.locator("#run-live .run-head .chip")
    expect(chip).to_have_text("running")
    site.call(lambda: site.client.signal(held.run_id, "go", Go()))
    expect(chip).to_have_text("succeeded")
    expect(page.locator('[data-verb="cancel"]')).to_have_attribute("aria-disabled", "true")


def test_flow_shows_a_debounced_burst_as_one_run_and_the_rest_collapsed(site: Site, page: Page) -> None:
    handles = [site.call(lambda n=n: site.client.start("edits", Edit(row="r-7", n=n))) for n in range(6)]

    async def started() -> bool:
        runs = await site.client.inspector.runs(workflow="edits")
        return len(runs) == 1 and runs[0].status == "succeeded"

    wait_until(site, started)
    printers = [site.call(lambda n=n: site.client.start("printer", Order(id=f"p{n}"))) for n in range(3)]
    site.call(lambda: site.client.pause("echo", "deploy"))
    page.goto(f"{site.url}/ui/flow?window=15m")
    row = page.locator('tr[data-flow="edits|r-7"]')
    expect(row.locator('[data-col="admitted"]')).to_have_text("1")
    expect(row.locator('[data-col="collapsed"]')).to_have_text("5")
    expect(row.locator("svg.spark polyline")).to_have_count(1)
    # the pending queue, with positions, fills in live as the printers queue behind the first
    queue = page.locator("#queue tbody tr", has_text="printer")
    expect(queue).to_have_count(2)
    expect(queue.nth(0).locator('[data-col="position"]')).to_have_text("0")
    expect(queue.nth(1).locator('[data-col="position"]')).to_have_text("1")
    expect(page.locator('tr[data-flow="printer|"] [data-col="in_flight"]')).to_have_text("1 / 1")
    shot(page, "flow")

    # a pause lifted from its button
    page.click('button[aria-label="Unpause workflow echo"]')
    expect(page.locator("#pauses")).to_contain_text("No pause in force")
    assert site.call(lambda: site.client.inspector.pauses()) == []

    # bulk cancel: the dry run lists the running printer before the commit button appears
    page.select_option("#b-verb", "cancel")
    page.fill("#b-workflow", "printer")
    page.fill("#b-reason", "reprint later")
    page.click("text=Preview")
    expect(page.locator("h1")).to_contain_text("preview")
    expect(page.locator("table.bulk tbody tr")).to_have_count(1)
    assert printers[0].run_id and printers[0].run_id in page.content()
    assert run_of(site, printers[0].run_id).status == "running"
    shot(page, "bulk")
    page.click("#commit")
    expect(page.locator("[role=status]")).to_contain_text("Done on 1 run")
    wait_status(site, printers[0].run_id, "cancelled")
    page.goto(f"{site.url}/ui/runs?workflow=edits")
    expect(page.locator("table.runs tbody tr")).to_have_count(1)

    # why: a later edit's ticket was absorbed by the first; the ticket box traces it to the run
    page.goto(f"{site.url}/ui/why")
    page.fill("#ticket", handles[3].ticket)
    page.press("#ticket", "Enter")
    diagram = page.locator("figure.trace")
    expect(diagram).to_contain_text("edits")
    expect(diagram).to_contain_text("succeeded")
    expect(diagram.locator(".node")).to_have_count(4)  # arrival, control, absorbed by, run
    expect(diagram).to_contain_text("absorbed by")
    shot(page, "why")


def test_a_script_in_a_payload_is_shown_as_text(site: Site, page: Page) -> None:
    evil = "<script>alert(1)</script>"
    handle = site.call(lambda: site.client.start("echo", Order(id="x", note=evil)))
    assert handle.run_id
    wait_status(site, handle.run_id, "succeeded")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{site.url}/ui/runs/{handle.run_id}")
    payload = page.locator('pre[aria-label="run payload"]')
    expect(payload).to_contain_text(evil)
    expect(page.locator('pre[aria-label="run output"]')).to_contain_text(evil)
    assert page.locator("main script").count() == 0
    page.goto(f"{site.url}/ui/runs?q=alert")
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    assert dialogs == []


def test_a_saved_view_reloads_from_its_url(site: Site, page: Page) -> None:
    page.goto(f"{site.url}/ui/runs?workflow=echo&status=succeeded")
    page.fill("#view-name", "echo done")
    page.click("text=Save view")
    expect(page).to_have_url(re.compile(r"/ui/runs\?workflow=echo&status=succeeded$"))
    expect(page.locator(".views a", has_text="echo done")).to_have_count(1)
    fresh = page.context.new_page()
    fresh.goto(f"{site.url}/ui/views/echo%20done")
    expect(fresh).to_have_url(re.compile(r"workflow=echo"))
    expect(fresh.locator("#f-status")).to_have_value("succeeded")
    expect(fresh.locator("#f-workflow")).to_have_value("echo")
    for cell in fresh.locator("table.runs tbody tr td:nth-child(2)").all_inner_texts():
        assert cell == "echo"
    fresh.close()


def test_pages_read_without_javascript_and_by_keyboard(site: Site, browser: Browser) -> None:
    context = browser.new_context(
        java_script_enabled=False, color_scheme="dark", viewport={"width": 1100, "height": 760}
    )
    page = context.new_page()
    try:
        page.goto(f"{site.url}/ui/runs")
        page.keyboard.press("Tab")
        expect(page.locator(".skip")).to_be_focused()
        page.select_option("#f-status", "succeeded")
        page.click("text=Apply")  # a plain GET: the filters land in the URL, without the empty ones
        expect(page).to_have_url(re.compile(r"/ui/runs\?status=succeeded$"))
        assert page.locator("table.runs tbody tr").count() >= 1
        shot(page, "runs-dark")
        page.goto(f"{site.url}/ui/cluster")
        expect(page.locator("table tbody tr").first).to_contain_text("live")
    finally:
        context.close()


def test_events_with_deliveries_schedules_and_the_cluster(site: Site, page: Page) -> None:
    event_id = site.call(lambda: site.client.publish("order.paid", {"order_id": "A-7"}, {"total": 12.5}))

    async def delivered() -> bool:
        found = await site.client.inspector.deliveries(event_id)
        return bool(found) and found[0].status == "started"

    wait_until(site, delivered)
    page.goto(f"{site.url}/ui/events")
    row = page.locator("table.events tbody tr", has_text="order.paid")
    expect(row).to_contain_text("started")
    row.locator("a").first.click()
    expect(page.locator("#run-live")).to_contain_text("paid 12.5")
    page.goto(f"{site.url}/ui/events")
    shot(page, "events")
    page.goto(f"{site.url}/ui/schedules")
    expect(page.locator("table tbody tr", has_text="nightly").first).to_contain_text("0 3 * * *")
    shot(page, "schedules")
    page.goto(f"{site.url}/ui/cluster")
    expect(page.locator("table tbody tr").first).to_contain_text("live")
    shot(page, "cluster")
