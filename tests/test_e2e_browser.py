"""The Prefect UI of the e2e server in headless Chromium (Debian's ``chromium`` driven by
Playwright; no browser download): the UI asks for the server's auth string and refuses a
wrong one; logged in, the operator finds the release's flow run, its artifacts and the link to
the validation report. Screenshots go to a temporary folder, or to ``docs/screenshots/prefect/``
with ``DAS_REFRESH_SCREENSHOTS=1`` (or to ``$DAS_SCREENSHOTS``) for a person to look at.

Run with ``pytest -m e2e`` (``.ci/e2e-prefect``); each test makes the runs it looks at
(session fixtures of ``prefect_stack.py``, shared with the other e2e tests of the session).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect_stack import PrefectStack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    # Hermetic: every host name but the local server fails to resolve.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
VIEWPORT = {"width": 1600, "height": 1000}
# The UI scrolls inside its main panel, not the page: a tall window shows a whole artifact.
TALL = {"width": 1600, "height": 2400}


@pytest.fixture(scope="module")
def screenshots(screenshots_root: Path) -> Path:
    """docs/screenshots/prefect/ with DAS_REFRESH_SCREENSHOTS=1 (or $DAS_SCREENSHOTS), else a
    temporary folder (tests/conftest.py)."""
    folder = Path(os.environ.get("DAS_SCREENSHOTS", screenshots_root / "prefect"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not CHROMIUM.is_file():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


def _password_field(page):
    return page.locator("input[type=password]").first


def _log_in(page, stack: PrefectStack, auth_string: str) -> None:
    """The UI's login form: the auth string (user:password) in its one field, then Enter."""
    field = _password_field(page)
    field.wait_for(timeout=60_000)
    field.fill(auth_string)
    field.press("Enter")


@pytest.fixture
def page(browser, prefect_stack: PrefectStack):
    """A browser tab logged in to the UI (through its login form, as an operator does); the
    UI keeps the credentials for the tab's later page loads."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(f"{prefect_stack.ui_url}/runs", wait_until="domcontentloaded")
    _log_in(page, prefect_stack, prefect_stack.auth_string)
    page.get_by_text("Deployments", exact=True).first.wait_for(timeout=60_000)
    yield page
    context.close()


def test_the_ui_asks_for_the_auth_string(
    prefect_stack: PrefectStack, browser, screenshots: Path
) -> None:
    """Without credentials the UI's own API calls are refused (401) and it shows its login
    form; at the address `das prefect server start` prints (/login) without the notice
    "Authentication failed" the front page raises; a wrong auth string is refused; the right
    one opens the UI."""
    stack = prefect_stack
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        answers: list[tuple[int, str]] = []

        def record(response) -> None:
            if "/api/" in response.url:
                answers.append((response.status, response.url))

        page.on("response", record)
        page.goto(f"{stack.ui_url}/runs", wait_until="domcontentloaded")
        _password_field(page).wait_for(timeout=60_000)
        assert "/login" in page.url
        page.get_by_text("Authentication failed.").first.wait_for(timeout=30_000)

        first_visit = browser.new_context(viewport=VIEWPORT)  # a browser that never came
        login = first_visit.new_page()
        login.goto(f"{stack.ui_url}/login", wait_until="domcontentloaded")
        _password_field(login).wait_for(timeout=60_000)
        login.wait_for_load_state("networkidle")
        # Prefect's notice for its first refused call (README, Authentication): once it shows,
        # the login check has been answered, and no "Authentication failed" came with it.
        login.get_by_text("Oops. Something went wrong.").first.wait_for(timeout=30_000)
        assert login.get_by_text("Authentication failed.").count() == 0
        login.screenshot(path=screenshots / "00-login.png")
        first_visit.close()
        anonymous = [(status, url) for status, url in answers if not url.endswith("/health")]
        assert anonymous and {status for status, _ in anonymous} == {401}, anonymous

        _log_in(page, stack, "das-e2e:not-the-password")
        page.get_by_text("Authentication failed.").last.wait_for(timeout=30_000)
        page.wait_for_load_state("networkidle")
        assert "/login" in page.url
        # The UI forgets a refused auth string (it may take a moment after the message).
        page.wait_for_function("localStorage.getItem('prefect-password') === null",
                               timeout=15_000)  # fmt: skip

        answers.clear()
        _log_in(page, stack, stack.auth_string)
        page.get_by_text("Deployments", exact=True).first.wait_for(timeout=60_000)
        page.wait_for_load_state("networkidle")
        assert "/login" not in page.url
        assert answers and {status for status, _ in answers} == {200}, answers
    finally:
        context.close()


def _open(page, url: str, text: str) -> None:
    """Go to ``url`` and wait until ``text`` shows (the UI renders after its API calls)."""
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_text(text, exact=False).first.wait_for(timeout=60_000)
    page.wait_for_load_state("networkidle")


def test_operator_finds_the_run_its_artifacts_and_the_report(
    prefect_stack: PrefectStack, first_runs: dict[str, str], page, screenshots: Path
) -> None:
    stack = prefect_stack
    release = stack.flow_run(first_runs["safetab-p/safetab-p-us-pr"])

    _open(page, f"{stack.ui_url}/runs", release["name"])
    page.screenshot(path=screenshots / "01-runs.png")

    _open(page, f"{stack.ui_url}/runs/flow-run/{release['id']}", release["name"])
    page.screenshot(path=screenshots / "02-safetab-p-flow-run.png")
    page.get_by_text("Artifacts", exact=True).first.click()
    page.get_by_text("safetab-p-audit").first.wait_for(timeout=30_000)
    page.screenshot(path=screenshots / "03-safetab-p-artifacts.png")
    # The progress artifact's card draws its description's bar (tasks/progress.py), full.
    bar = page.locator("progress").first
    assert bar.get_attribute("value") == "100" and bar.is_visible()
    bar.scroll_into_view_if_needed()
    page.screenshot(path=screenshots / "12-progress-artifact.png")

    artifacts = {a["key"]: a for a in stack.artifacts(release["id"]) if a.get("key")}
    shots = {
        "safetab-p-audit": "04-safetab-p-audit.png",
        "safetab-p-privacy-totals": "05-safetab-p-privacy-totals.png",
        "safetab-p-privacy-us": "06-safetab-p-privacy-us.png",
    }
    page.set_viewport_size(TALL)
    for key, name in shots.items():
        _open(page, f"{stack.ui_url}/artifacts/artifact/{artifacts[key]['id']}", key)
        page.screenshot(path=screenshots / name)

    phsafe = stack.flow_run(first_runs["phsafe/phsafe-us"])
    ph_artifacts = {a["key"]: a for a in stack.artifacts(phsafe["id"]) if a.get("key")}
    for key, name in {
        "phsafe-privacy-us": "07-phsafe-privacy-us.png",
        "phsafe-audit": "08-phsafe-audit.png",
    }.items():
        _open(page, f"{stack.ui_url}/artifacts/artifact/{ph_artifacts[key]['id']}", key)
        page.screenshot(path=screenshots / name)

    page.set_viewport_size(VIEWPORT)
    validation = stack.flow_run(first_runs["validate/validate-safetab-p"])
    summary = next(
        a for a in stack.artifacts(validation["id"]) if a["key"] == "validation-safetab-p-us-pr"
    )
    _open(page, f"{stack.ui_url}/artifacts/artifact/{summary['id']}", "Validation report")
    page.screenshot(path=screenshots / "09-validation-links.png")
    report = page.locator("a[href$='report.html']").first
    assert (
        report.get_attribute("href")
        == (stack.root / "validation" / "safetab-p" / "report.html").as_uri()
    )
    data_docs = page.locator("a[href$='data_docs/index.html']").first
    assert data_docs.count() == 1


def test_the_run_list_tells_a_refused_run_from_a_crashed_one(
    prefect_stack: PrefectStack, crashed_run: str, refused_run: str, page, screenshots: Path
) -> None:
    """A refused (rejected approval: ``refused_run``) and a crashed (killed: ``crashed_run``)
    run show in the run list with their own state badges; the release run's page leads with
    its progress and release artifacts."""
    stack = prefect_stack
    runs = {run["state"]["name"]: run for run in map(stack.flow_run, (crashed_run, refused_run))}
    assert set(runs) == {"Crashed", "Refused"}, runs
    _open(page, f"{stack.ui_url}/runs", runs["Refused"]["name"])
    page.get_by_text(runs["Crashed"]["name"]).first.wait_for(timeout=60_000)
    for state in ("Refused", "Crashed", "Completed"):
        page.get_by_text(state, exact=True).first.wait_for(timeout=30_000)
    page.screenshot(path=screenshots / "10-refused-and-crashed.png")
    _open(page, f"{stack.ui_url}/runs/flow-run/{runs['Refused']['id']}", "Refused")
    page.get_by_text("Artifacts", exact=True).first.click()
    page.get_by_text("phsafe-refused").first.wait_for(timeout=30_000)
    page.screenshot(path=screenshots / "11-refused-run.png")


def test_the_resume_form_shows_what_is_signed_and_cancel_withdraws_the_request(
    prefect_stack: PrefectStack, waiting_runs: dict[str, str], page, screenshots: Path
) -> None:
    """A run waiting for its approvers (``waiting_runs``), as an approver meets it: *Resume*
    opens a form whose text — the spend per pass, the dataset, the parameters, the live count
    — shows above its fields; the reject switch changes with the mouse and the keyboard; no
    field a decision needs says "(Optional)"; *Submit* without a signature is refused with the
    reason and the run stays suspended. Then *Cancel*: Prefect cancels the suspended run at
    once, and the approvals sweep withdraws its request, which no signature can then
    authorize."""
    from prefect_stack import sweep

    from das.trust import canonical_json, sign

    stack = prefect_stack
    run = stack.flow_run(waiting_runs["waiting"])
    _open(page, f"{stack.ui_url}/runs/flow-run/{run['id']}", run["name"])
    page.get_by_text("awaiting-approval").first.wait_for(timeout=30_000)
    page.screenshot(path=screenshots / "13-paused-for-approval.png")
    page.get_by_role("button", name="Resume").first.click()
    form = page.locator(".p-modal")
    form.get_by_text("signatures so far").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)  # the modal's transition
    page.screenshot(path=screenshots / "15-resume-form.png")
    text = form.inner_text()
    assert "Privacy spend of phsafe" in text and "cumulative" in text and "Dataset" in text
    assert "0 of 1 signatures so far" in text
    # What is signed comes before the fields, and shows whole (no scrolling inside the text).
    description = form.locator(".markdown-renderer").first
    assert description.evaluate("e => e.scrollHeight <= e.clientHeight + 1")
    box, field = description.bounding_box(), form.get_by_text("Reject this spend").bounding_box()
    assert box["y"] + box["height"] <= field["y"]
    assert text.count("(Optional)") == 1 and "Who rejects (recorded as typed) (Optional)" in text
    switch = form.get_by_role("switch").first

    def checked(value: str) -> None:  # the UI re-renders the switch after the event
        switch.and_(page.locator(f"[aria-checked='{value}']")).wait_for(timeout=10_000)

    checked("false")
    switch.click()
    checked("true")
    switch.focus()
    page.keyboard.press("Space")
    checked("false")
    form.get_by_role("button", name="Submit").click()
    toast = page.get_by_text("does not match '-----BEGIN SSH SIGNATURE-----'").first
    toast.wait_for(timeout=30_000)
    page.screenshot(path=screenshots / "16-resume-without-signature.png")
    assert stack.flow_run(run["id"])["state"]["name"] == "Suspended"
    form.get_by_role("button", name="Close").click()

    page.get_by_role("button", name="Cancel").first.click()
    page.locator(".p-modal").get_by_role("button", name="Confirm").click()  # "Cancel Flow Run"
    assert stack.wait(run["id"], timeout=120) == "CANCELLED"
    assert stack.flow_run(run["id"])["state"]["name"] == "Cancelled"
    sweep(stack)  # (or the sweep its schedule ran meanwhile)
    ledger = stack.ledger()
    request = next(a for a in ledger.approvals() if a["statement"].get("run_id") == run["id"])
    assert request["rejection"]["withdrawn"]
    keys = stack.root / "keys" / "local-approver"
    late = sign(canonical_json(request["statement"]), "das-approval", keys)
    with pytest.raises(Exception, match="withdrawn"):
        ledger.sign_approval(request["approval_id"], late)
