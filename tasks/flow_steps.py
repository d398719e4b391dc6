"""How the product flows run their tasks: a step once per run, all futures settled, retries of
faults only, the draws counted into the audit."""

from __future__ import annotations

from das.offline import configure_offline

configure_offline()

from collections.abc import Callable, Collection, Sequence  # noqa: E402
from typing import Any  # noqa: E402

from prefect import get_run_logger  # noqa: E402

from das.refusal import RunRefused  # noqa: E402
from das.runs.audit import AuditRecorder  # noqa: E402
from das.runs.records import InputUnreadable  # noqa: E402
from das.runs.steps import RunSteps  # noqa: E402


def unless_refused(task: Any, task_run: Any, state: Any) -> bool:
    """A task's ``retry_condition_fn``: retry faults, not refusals or unreadable inputs (a
    file that cannot be read fails the same way again)."""
    return not isinstance(state.data, RunRefused | InputUnreadable)


def run_once(
    steps: RunSteps, name: str, call: Callable[[], Any], made: Collection[str] = ()
) -> Any:
    """``call()`` unless step ``name`` is complete — made by an earlier attempt of this run, or
    by this attempt's read of the records (``made``: validation's one read) — then its recorded
    result; marks the step complete afterwards. Results must be JSON values."""
    earlier = steps.done(name)
    if earlier is not None:
        if name in made:
            get_run_logger().info("step %s: made by validation's read of the records", name)
        else:
            get_run_logger().info("step %s: done by an earlier attempt, not repeated", name)
        return earlier.get("result")
    result = call()
    steps.mark(name, result=result)
    return result


def settled(futures: Sequence[Any], on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """The results of ``futures`` once *all* of them finished (``on_done(future)`` called as
    each does: progress): when one fails, the others (drawing tasks) are not left running behind
    the failure, so the failed attempt's audit lists every draw it persisted."""
    from prefect.futures import as_completed

    for future in as_completed(list(futures)):
        if on_done is not None:
            on_done(future)
    return [future.result() for future in futures]


def record_draws(audit: AuditRecorder, results: Sequence[Any], what: str) -> None:
    """The measured partitions' fresh and reused draws, into the audit and the run log."""
    fresh = sum(len(result.fresh) for result in results)
    reused = sum(len(result.reused) for result in results)
    audit.update(draws={"fresh": fresh, "reused": reused})
    get_run_logger().info("measured %d %s: %d draws, %d reused from the run folder",
                          len(results), what, fresh, reused)  # fmt: skip
