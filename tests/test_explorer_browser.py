"""`das explore` in headless Chromium: the page opens on the 2020 parameters and lists the
populations synthesized earlier in its workspace, a MOE target changes ρ and the total to the
calculator's values, a budget the engine cannot evaluate is reported next to its field, edits
survive a reload until "Reset to preset", the exports are named by product and pass and pass
`das budget report` with the same totals, the status line says what finished, and every panel
is photographed (into a temporary folder; docs/screenshots/explorer/ with
DAS_REFRESH_SCREENSHOTS=1).

Needs Debian's chromium (/usr/bin/chromium) and Playwright for Python (dev extra); skips
without them (a skip CI turns into a failure). Every request of the page must stay on
127.0.0.1 (offline page).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path

import pytest

from das.budget.config_report import budget_report
from das.privacy import calculators
from explorer import populations

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
DEMO_SPECS = REPO / "data_specs" / "safetab_p" / "demo"
PRESET = REPO / "data_specs" / "presets" / "production_2020" / "safetab_p" / "config.json"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.is_file(), reason="Debian chromium not installed"),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def explorer_url(tmp_path: Path):
    # A population synthesized by an earlier session of the explorer in the same workspace.
    populations.synthesize(tmp_path / "workspace", "safetab-p", 3000, 7)
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "das",
            "explore",
            "--no-browser",
            "--port",
            str(port),
            "--workspace",
            str(tmp_path / "workspace"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"das explore did not start: {server.stdout.read()}"
                    ) from None
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


def _wait_changed(page, attribute: str, before: str | None, timeout: float = 60_000) -> None:
    value = f"document.body.dataset.{attribute}"
    page.wait_for_function(f"{value} && {value} !== {json.dumps(before)}", timeout=timeout)


def _options(page, select: str) -> list[str]:
    return page.evaluate(f"[...document.querySelector('{select}').options].map(o => o.text)")


def _export(page, button: str, folder: Path) -> Path:
    with page.expect_download() as download:
        page.click(button)
    name = download.value.suggested_filename
    path = folder / name
    download.value.save_as(path)
    return path


@pytest.fixture
def screenshots(screenshots_root: Path) -> Path:
    """docs/screenshots/explorer/ with DAS_REFRESH_SCREENSHOTS=1 (or $DAS_EXPLORER_SCREENSHOTS),
    else a temporary folder (tests/conftest.py)."""
    folder = Path(os.environ.get("DAS_EXPLORER_SCREENSHOTS", screenshots_root / "explorer"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_explorer_in_chromium(explorer_url: str, tmp_path: Path, screenshots: Path) -> None:
    # Inside the test, so that a missing Playwright is a skip CI turns into a failure.
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    requests: list[str] = []
    with playwright_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
        page.on("request", lambda request: requests.append(request.url))
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(explorer_url)

        # The first screen: the 2020 production parameters, SafeTab-P US total ρ = 4.944.
        total = page.locator("#stp-total-US")
        total.wait_for()
        assert total.inner_text() == "4.944"
        assert page.locator("#stp-total-PR").inner_text() == "2.643"
        assert page.locator("#edited-badge").is_hidden()
        assert page.locator("#reset-edits").is_disabled()
        # The population an earlier session synthesized is listed at once (no Synthesize).
        page.wait_for_function("document.body.dataset.populationsReady")
        assert _options(page, "#sim-population") == ["safetab-p, 3,000 persons, seed 7"]
        assert _options(page, "#ph-trunc-population") == []
        assert "no PHSafe population" in page.locator("#ph-trunc-populations-note").inner_text()
        page.wait_for_timeout(500)
        page.screenshot(path=str(screenshots / "safetab-p.png"))
        page.locator("#panel-safetab .plots").screenshot(
            path=str(screenshots / "safetab-p-plots.png")
        )

        # Change the 95% MOE target of (COUNTY, 2) from 11 to 12: ρ and the total follow.
        before = page.evaluate("document.body.dataset.stpReady")
        moe = page.locator('input[data-role="moe"][data-key="(COUNTY, 2)"]')
        moe.fill("12")
        moe.press("Enter")
        _wait_changed(page, "stpReady", before)
        expected_rho = round(
            calculators.rho_for_moe(12, 0.95, 3, stage_fraction=Fraction(9, 10)).rho_total, 6
        )
        shown_rho = page.locator('input[data-role="budget"][data-key="(COUNTY, 2)"]').input_value()
        assert float(shown_rho) == expected_rho
        config = json.loads(PRESET.read_text())
        config["privacy_budget_p_level_2_county"] = expected_rho
        edited = tmp_path / "expected" / "config.json"
        edited.parent.mkdir()
        edited.write_text(json.dumps(config))
        expected = budget_report(edited, specs_dir=DEMO_SPECS)["passes"]["US"]
        shown_total = page.locator("#stp-total-US").inner_text()
        assert float(shown_total) == expected["rho"]
        assert Fraction(shown_total) == Fraction(expected["rho_exact"])

        # A budget the engine cannot evaluate: 422, its message next to the field, the figures
        # stay those of the last set that evaluated; the next good value clears it.
        budget = page.locator('input[data-role="budget"][data-key="(TRACT, 2)"]')
        before = page.evaluate("document.body.dataset.fieldError || null")
        budget.fill("1e308")
        budget.press("Enter")
        _wait_changed(page, "fieldError", before)
        bubble = page.locator("#field-error")
        assert bubble.is_visible() and bubble.inner_text().strip()
        assert "invalid" in (budget.get_attribute("class") or "")
        below = bubble.bounding_box()["y"] - budget.bounding_box()["y"]
        assert 0 < below < 60  # just under the field
        assert page.locator("#error").is_hidden()
        assert page.locator("#stp-total-US").inner_text() == shown_total
        page.evaluate("window.scrollTo(0, 0)")  # the header too (the edited badge)
        page.wait_for_timeout(300)
        page.screenshot(path=str(screenshots / "field-error.png"))
        before = page.evaluate("document.body.dataset.stpReady")
        budget.fill("0.159")
        budget.press("Enter")
        _wait_changed(page, "stpReady", before)
        assert bubble.is_hidden() and page.locator("#stp-total-US").inner_text() == shown_total

        # A PHSafe PR edit; both edits survive a reload (kept in this browser).
        page.click("nav button[data-panel=phsafe]")
        before = page.evaluate("document.body.dataset.phReady")
        ph_budget = page.locator('input[data-role="ph-budget"][data-key="PR/PH1_num/state_*"]')
        ph_budget.fill("0.5")
        ph_budget.press("Enter")
        _wait_changed(page, "phReady", before)
        edited_pr = page.locator("#ph-total-PR").inner_text()
        assert edited_pr != "1.226649"
        page.reload()
        page.wait_for_function("document.body.dataset.restored !== undefined")
        assert page.evaluate("document.body.dataset.restored") == "SafeTab-P, PHSafe PR"
        assert page.locator("#stp-total-US").inner_text() == shown_total
        assert (
            float(page.locator('input[data-role="budget"][data-key="(COUNTY, 2)"]').input_value())
            == expected_rho
        )
        assert page.locator("#ph-total-PR").inner_text() == edited_pr
        assert page.locator("#ph-total-US").inner_text() == "1.257281"
        assert page.locator("#edited-badge").is_visible()
        assert page.locator("#reset-edits").is_enabled()

        # Export, then `das budget report` on the file: the same totals to the last digit.
        page.click("nav button[data-panel=files]")
        (tmp_path / "export").mkdir()
        exported = _export(page, "#export-safetab", tmp_path / "export")
        assert exported.name == "safetab-p-config.json"
        for name in ("US", "PR"):
            ph_file = _export(page, f"#export-ph-{name}", tmp_path / "export")
            assert ph_file.name == f"phsafe-{name.lower()}-config.json"
            assert budget_report(ph_file)["passes"][name]["rho"] == float(
                page.locator(f"#ph-total-{name}").inner_text()
            )
        assert "rename it config.json" in page.locator("#export-message").inner_text()
        page.screenshot(path=str(screenshots / "load-export.png"))
        report = subprocess.run(
            [
                sys.executable,
                "-m",
                "das",
                "budget",
                "report",
                "--config",
                str(exported),
                "--specs",
                str(DEMO_SPECS),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        passes = json.loads(report.stdout)["passes"]
        assert str(passes["US"]["rho"]) == shown_total
        assert passes["US"]["rho_exact"] == expected["rho_exact"]
        assert str(passes["PR"]["rho"]) == page.locator("#stp-total-PR").inner_text()

        # Compare: the edited level is highlighted against the 2020 preset.
        before = page.evaluate("document.body.dataset.cmpReady || null")
        page.click("nav button[data-panel=compare]")
        _wait_changed(page, "cmpReady", before)
        changed = page.locator("#cmp-table tr", has=page.locator("td.key", has_text="(COUNTY, 2)"))
        assert changed.locator("td.diff").count() >= 2
        page.screenshot(path=str(screenshots / "compare.png"))

        # PHSafe: 2020 US total (PR edited above); τ on a synthetic population.
        page.click("nav button[data-panel=phsafe]")
        assert page.locator("#ph-total-US").inner_text() == "1.257281"
        page.click("nav button[data-panel=simulate]")
        page.select_option("#sim-product", "phsafe")
        page.fill("#synth-persons", "20000")
        page.click("#synth-run")
        page.wait_for_function("document.querySelector('#sim-population').options.length > 0")
        assert re.fullmatch(
            r"Synthesized a PHSafe population: 20,000 persons, seed 1, in \d+(\.\d)? s \(.+\)",
            page.locator("#sim-message").inner_text(),
        )
        page.click("nav button[data-panel=phsafe]")
        page.wait_for_function("document.querySelector('#ph-trunc-population').options.length > 0")
        before = page.evaluate("document.body.dataset.truncReady || null")
        page.click("#ph-trunc-run")
        _wait_changed(page, "truncReady", before)
        page.screenshot(path=str(screenshots / "phsafe.png"))
        page.locator("#panel-phsafe .plots").screenshot(path=str(screenshots / "phsafe-plots.png"))

        # Simulate SafeTab-P on a synthetic population: progress, then results and plots.
        page.click("nav button[data-panel=simulate]")
        page.select_option("#sim-product", "safetab-p")
        page.fill("#synth-persons", "20000")
        page.click("#synth-run")
        options = "[...document.querySelector('#sim-population').options]"
        page.wait_for_function(f"{options}.some(o => o.text.startsWith('safetab-p, 20,000'))")
        assert "safetab-p, 3,000 persons, seed 7" in _options(page, "#sim-population")
        assert page.locator("#sim-population").input_value().endswith("safetab-p-20000-seed1")
        page.fill("#sim-replicates", "2")
        before = page.evaluate("document.body.dataset.simReady || null")
        page.click("#sim-start")
        _wait_changed(page, "simReady", before, timeout=240_000)
        assert page.evaluate("document.body.dataset.simStatus") == "done"
        assert page.locator("#sim-results table tr").count() > 10
        status = page.locator("#sim-message").inner_text()
        assert re.fullmatch(r"SafeTab-P simulation finished: 2 replicates in \d+\.\d s", status)
        page.wait_for_timeout(500)  # the progress bar's 0.3 s transition to 100%
        page.screenshot(path=str(screenshots / "simulate.png"), full_page=True)

        # Simulate PHSafe (engine + postprocessing) on the PHSafe population made above.
        page.select_option("#sim-product", "phsafe")
        page.wait_for_function(
            f"{options}.length > 0 && {options}.every(o => o.text.startsWith('phsafe'))"
        )
        page.fill("#sim-replicates", "1")
        before = page.evaluate("document.body.dataset.simReady || null")
        page.click("#sim-start")
        _wait_changed(page, "simReady", before, timeout=240_000)
        assert page.evaluate("document.body.dataset.simStatus") == "done"
        assert "interval coverage" in page.locator("#sim-results").inner_text()
        status = page.locator("#sim-message").inner_text()
        assert re.fullmatch(r"PHSafe US simulation finished: 1 replicate in \d+\.\d s", status)
        page.wait_for_timeout(500)
        page.screenshot(path=str(screenshots / "simulate-phsafe.png"), full_page=True)

        # Reset to preset: the 2020 totals again, nothing kept, also after a reload.
        before = page.evaluate("document.body.dataset.stpReady")
        page.click("#reset-edits")
        _wait_changed(page, "stpReady", before)
        page.wait_for_function("document.querySelector('#ph-total-PR').innerText === '1.226649'")
        assert page.locator("#stp-total-US").inner_text() == "4.944"
        assert page.locator("#edited-badge").is_hidden()
        page.reload()
        page.wait_for_function("document.body.dataset.restored !== undefined")
        assert page.evaluate("document.body.dataset.restored") == ""
        assert page.locator("#stp-total-US").inner_text() == "4.944"

        browser.close()
    assert errors == []
    outside = [
        url for url in requests if not url.startswith(("http://127.0.0.1:", "blob:", "data:"))
    ]
    assert outside == []
