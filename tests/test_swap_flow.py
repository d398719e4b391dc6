"""The Prefect `swap` flow, in process against a temporary Prefect server (one per session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from das.offline import configure_offline

configure_offline()

from prefect_fixtures import artifacts  # noqa: E402
from test_swapping_cli import MATCH, SWAP, write_unit_folder  # noqa: E402

from flows.swap import swap_flow  # noqa: E402
from tasks.swap import REPORT_ARTIFACT_KEY  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_swap_flow_writes_outputs_and_a_report_artifact(tmp_path: Path) -> None:
    data = write_unit_folder(tmp_path / "in", n=200, seed=4)
    out = tmp_path / "out"
    state = swap_flow(
        data_dir=str(data),
        output=str(out),
        match=MATCH.split(","),
        swap=SWAP.split(","),
        rate="0.2",
        seed=5,
        return_state=True,
    )
    result = state.result()
    assert result["invariants_exact"] is True and result["records"] == 200
    report = json.loads((out / "report.json").read_text())
    assert report["b"] == result["b"] and report["randomness"]["seed"] == 5
    posted = artifacts(REPORT_ARTIFACT_KEY, str(state.state_details.flow_run_id))
    assert posted, "no markdown artifact was created"
    assert "## Invariants" in posted[0].data and f"b = {result['b']}" in posted[0].data


def test_swap_flow_fails_before_writing_on_bad_input(tmp_path: Path) -> None:
    data = write_unit_folder(tmp_path / "in", n=20)
    with pytest.raises(KeyError, match="unknown variable"):
        swap_flow(
            data_dir=str(data), output=str(tmp_path / "out"), match=["NOPE"],
            swap=SWAP.split(","), rate="0.2", seed=1,
        )  # fmt: skip
    assert not (tmp_path / "out").exists()
