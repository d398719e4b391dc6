"""A refused run's artifact (tasks.refusal): its next step and where the run was started."""

from __future__ import annotations

import pytest

from das.refusal import Remedy, RunRefused


@pytest.mark.parametrize(
    ("context", "step", "where"),
    [
        ("deployment", "cumulative_total = {}", "a parameter of a new custom run of it"),
        ("cli", "--cumulative-total US=1", "its command-line flags"),
        ("python", "cumulative_total={}", "its keyword arguments"),
    ],
)
def test_the_artifact_says_in_which_terms_its_next_step_is_put(
    context: str, step: str, where: str
) -> None:
    """Not "Started from a deployment (a parameter of a custom run, or the ledger)", which
    left the reader guessing what the parenthesis meant."""
    from tasks.refusal import refusal_markdown

    remedy = Remedy(cli=step, deployment=step) if context != "python" else Remedy(cli=step)
    text = refusal_markdown("safetab-p", RunRefused("refused", remedy), context, "r1")
    assert f"## Next step\n\n{step}\n" in text.replace("\\", "")
    (note,) = [line for line in text.splitlines() if line.startswith("*Started from")]
    assert where in note and note.endswith(".*")
