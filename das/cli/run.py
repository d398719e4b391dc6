"""`das run {safetab-p|phsafe} --config FILE --data DIR --output DIR [--seed N] [--run-id ID]
[--skip-validation] [--cumulative-total PASS=TOTAL] [--replace-release] [--ledger DIR]
[--verbose]`:
run the product's Prefect flow in process and publish its release (SafeTab-P: t1/, t2/;
PHSafe: one folder per noisy table and per estimates table; audit.json, MANIFEST.json and
CERTIFICATE.intoto.json) into OUT, whole or not at all. The run's state (sealed parameters,
noise, spilled records, validation report, run log) goes to STATE/runs/<run-id>/, STATE being
the state root (DAS_STATE_DIR, else ${XDG_STATE_HOME:-~/.local/state}/das).

Exit codes:
  0  released;
  1  the run failed: invalid inputs or records that changed under it (nothing drawn; the
     validation report is in STATE/runs/<run-id>/validation/), or another error (the
     attempt's audit and run log are in STATE/runs/<run-id>/);
  2  refused or a usage error, nothing drawn: bad arguments, a seed or an infinite budget in
     production (a chartered ledger, or DAS_PRODUCTION), parameters outside the limits, no
     approval signed by a quorum in the privacy ledger (the exact `das ledger approve` command
     is printed), a dataset with recorded spend and no --cumulative-total (outside
     production), a run id bound to another run, an output inside a release, a work folder or
     the state root, another run's release or a live run in OUT;
  3  an infrastructure fault (the Dask workers lost, the Prefect API unreachable or busy, a
     full disk): one line names it; resuming (the same command with --run-id) reuses every
     draw the privacy ledger recorded.

Without PREFECT_API_URL (environment or Prefect profile) the flow runs against the local
Prefect API of `das server`: the first run starts it in the background and says so (~10-20 s
on 2 cores, once), later runs reuse it; DAS_LOCAL_API=temporary starts a temporary one per run
instead. On a terminal a live display shows the run's stages and
progress; elsewhere, progress lines go to stderr, each once. Prefect's per-task lines stay off
the console (the run log and the server keep them) unless --verbose.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from das.cli.arguments import resolved_path
from das.postprocess import INTERVALS

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # das.runs.faults.EXIT_INFRASTRUCTURE: 3


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a product end to end (exit 0 released, 1 failed, 2 refused, 3 infrastructure)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    products = run.add_subparsers(dest="run_product", required=True)
    text = (
        "config.json with the four spec files beside it; --data holds person-records and "
        "GRF-C (.txt or .parquet)"
    )
    safetab = _product_parser(products, "safetab-p", text)
    safetab.add_argument(
        "--coterminous",
        type=resolved_path,
        default=None,
        help="reviewed coterminous-geographies.txt (default: derived from the GRF-C)",
    )
    text = (
        'config.json of one pass (state_filter ["72"] = Puerto Rico, else the US); --data '
        "holds persons, units and geo (.csv or .parquet)"
    )
    phsafe = _product_parser(products, "phsafe", text)
    phsafe.add_argument(
        "--credible-interval",
        choices=INTERVALS,
        default="equal-tailed",
        help="90%% intervals of the count tables: equal-tailed (default) or highest posterior "
        "density (shortest; covers true zeros)",
    )


def _product_parser(
    products: argparse._SubParsersAction, product: str, text: str
) -> argparse.ArgumentParser:
    parser = products.add_parser(product, help=text, description=text)
    parser.add_argument("--config", required=True, type=resolved_path, help="the run's config.json")
    parser.add_argument("--data", required=True, type=resolved_path, help="folder of input files")
    parser.add_argument(
        "--output",
        required=True,
        type=resolved_path,
        help="release folder (may contain {run_id}: a new folder per run)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="reproducible noise: tests and demos only"
    )
    parser.add_argument(
        "--run-id", default=None, help="resume the run with this id (default: a new run)"
    )
    parser.add_argument(
        "--cumulative-total",
        action="append",
        default=None,
        metavar="PASS=TOTAL",
        help="accept a further spend on a dataset with recorded spend: the new cumulative "
        "total of the pass (exactly as the refusal states it; TOTAL alone for a one-pass run)",
    )
    parser.add_argument(
        "--replace-release",
        action="store_true",
        help="move an existing release of another run in OUT aside (recorded) instead of refusing",
    )
    parser.add_argument(
        "--skip-validation",
        action="store_true",
        help="inputs already validated by `das validate` (recorded in the audit; in production "
        "only when the privacy ledger holds a passing validation of the same records)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show every line Prefect logs on the console (one per task run, its progress "
        "lines) instead of the progress display; the run log keeps them either way",
    )
    parser.add_argument(
        "--ledger",
        type=resolved_path,
        default=None,
        help="privacy ledger folder (sets DAS_LEDGER_DIR for this run; default: DAS_LEDGER_DIR, "
        "DAS_LEDGER_URL, else outside production the per-user ledger)",
    )
    parser.set_defaults(handler=run_command)
    return parser


def _usage_error(message: str) -> int:
    print(f"das run: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _cumulative(values: list[str] | None) -> dict[str, str] | None:
    """``["US=9.888", "PR=5.286"]`` → ``{"US": "9.888", ...}``; a bare total is ``{"*": ...}``."""
    if not values:
        return None
    parsed: dict[str, str] = {}
    for value in values:
        name, _, total = value.rpartition("=")
        parsed[name.strip() or "*"] = total.strip()
    return parsed


class _OneLineErrors(logging.Filter):
    """On the terminal, an error record without its traceback (the run log keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info or record.exc_text:
            record.exc_info = None
            record.exc_text = None
        return True


@contextlib.contextmanager
def _quiet_tracebacks() -> Iterator[None]:
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    one_line = _OneLineErrors()
    for handler in handlers:
        handler.addFilter(one_line)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(one_line)


def _preflight(args: argparse.Namespace, parameters: dict[str, Any]) -> str | None:
    """The run's start checks before a Prefect API or a Dask cluster is started (the flow
    repeats them): a refusal costs a second, not the ~20 s of a temporary server. None when
    the run may start, else the refusal's text (with the next step in this command's syntax)."""
    from das.products import release_product
    from das.refusal import RunRefused
    from das.runs.start import RunRequest, check_start

    product = args.run_product
    released = release_product(product)
    inputs = released.run_inputs(args.config, args.data, getattr(args, "coterminous", None))
    request = RunRequest(
        product=product,
        output=args.output,
        seed=args.seed,
        run_id=args.run_id,
        parameters=parameters,
        cumulative_total=parameters["cumulative_total"],
        replace_release=args.replace_release,
        skip_validation=args.skip_validation,
        context="cli",
        config_path=args.config,
        data_dir=args.data,
    )
    try:
        check = check_start(request, inputs, released.parse_parameters, args.run_id)
    except RunRefused as exc:
        return exc.explained("cli")
    if check.ledger.created:
        print(
            f"das run {product}: created a new privacy ledger at {check.ledger.info.location} "
            "(no earlier spend is known to it)",
            file=sys.stderr,
        )
    return None


def _prewarm_validation(args: argparse.Namespace) -> None:
    """When this process will validate the inputs itself (its tasks on in-process threads),
    import Great Expectations in a process of its own now, on the other core, while this one
    imports Prefect and starts its flow run (:class:`das.validation.gx_runner.PrewarmedGx`).
    Not in a process that has imported Prefect or GX already (the test suite's, `das demo`'s
    after its first steps): there GX is imported once and costs nothing after."""
    from flows.sizing import IN_PROCESS_BELOW_BYTES, input_bytes

    if args.skip_validation or {"prefect", "great_expectations"} & sys.modules.keys():
        return
    if os.environ.get("DAS_DASK_ADDRESS"):
        return
    threads = os.environ.get("DAS_TASK_RUNNER") == "threads"
    if threads or input_bytes(args.data) < IN_PROCESS_BELOW_BYTES:
        from das.validation.gx_runner import prewarm

        prewarm()


def _announce_local_api(product: str) -> tuple[Any, float] | None:
    """Without a configured Prefect API: find the local API of this home (``das server``),
    or start it in the background now and say so — before the heavy imports, which then
    overlap its start — and point this process at it; with ``DAS_LOCAL_API=temporary``, say
    that a temporary API is about to start instead. What :func:`_start_local_api` waits for,
    and when; None when a Prefect API is configured."""
    import time

    from das.cli import server as local_api

    earlier = local_api.in_use()  # `das demo`'s second run: the one its first run started
    if earlier is not None:
        return earlier, time.monotonic()
    if local_api.api_configured():
        return None
    if not local_api.wanted():
        print(
            f"das run {product}: starting a temporary local Prefect API for this run (about "
            "20-40 s on 2 cores; without DAS_LOCAL_API=temporary, runs share `das server`)",
            file=sys.stderr,
            flush=True,
        )
        return None, time.monotonic()
    found = local_api.start()
    local_api.use(found)  # before Prefect reads its settings: this process and its children
    if found.started:
        replaced = f" (replacing the earlier one: {found.replaced})" if found.replaced else ""
        print(
            f"das run {product}: starting the local Prefect API at {found.api.url} in the "
            f"background{replaced}: the first run of this home waits ~10-20 s for it, later "
            "runs reuse it (`das server status`; `das server stop` stops it)",
            file=sys.stderr,
            flush=True,
        )
    return found, time.monotonic()


@contextlib.contextmanager
def _start_local_api(product: str, announced: tuple[Any, float] | None) -> Iterator[None]:
    """The API :func:`_announce_local_api` announced, waited for (the temporary one started
    now, once per process, rather than inside the flow), said when it answers; inside, the
    flow runs against it (Prefect's settings too, in case an earlier step of this process
    read them before the environment named it)."""
    if announced is None:
        yield
        return
    import time

    from prefect.client.orchestration import get_client
    from prefect.settings import (
        PREFECT_API_AUTH_STRING,
        PREFECT_API_SSL_CERT_FILE,
        PREFECT_API_URL,
        temporary_settings,
    )

    from das.cli import server as local_api

    found, since = announced
    if found is None:  # a temporary API, started by the client's first call
        with get_client(sync_client=True) as client:
            client.api_healthcheck()
        print(
            f"das run {product}: the local Prefect API answered after "
            f"{time.monotonic() - since:.0f} s; starting the flow run",
            file=sys.stderr,
            flush=True,
        )
        yield
        return
    local_api.wait_ready(found)
    if found.started:
        print(
            f"das run {product}: the local Prefect API answered after "
            f"{time.monotonic() - since:.0f} s; starting the flow run",
            file=sys.stderr,
            flush=True,
        )
    updates = {PREFECT_API_URL: found.api.url, PREFECT_API_AUTH_STRING: found.auth}
    trust = os.environ.get(local_api.CLIENT_TRUST_ENV)
    if trust:  # the one-certificate trust store use() named (a quicker TLS context per client)
        updates[PREFECT_API_SSL_CERT_FILE] = trust
    with temporary_settings(updates=updates):
        yield


def _watch_for_crashes(product: str) -> None:
    """The server's crash automation (``flows.crash_detection``), created when it has none, so
    that this run, if its process dies, is marked Crashed instead of Running forever. One
    found with a window too short for this process's heartbeat is left as is, with a warning."""
    from prefect.client.orchestration import get_client

    from das.heartbeats import MISSED_BEATS_TOLERATED, liveness
    from flows.crash_detection import AUTOMATION_NAME, ensure_crash_automation

    settings = liveness()
    with get_client(sync_client=True) as client:
        ensured = ensure_crash_automation(client, settings, update=False)
    if ensured.crash_after_seconds < MISSED_BEATS_TOLERATED * settings.heartbeat_seconds:
        print(f"das run {product}: warning: the server's automation \"{AUTOMATION_NAME}\" "
              f"crashes a run after {ensured.crash_after_seconds:.0f} s without a heartbeat, "
              f"and this run beats every {settings.heartbeat_seconds} s (DAS_HEARTBEAT_SECONDS): "
              "it may be marked Crashed while alive. Run `das deploy` with the same settings",
              file=sys.stderr)  # fmt: skip


def run_command(args: argparse.Namespace) -> int:
    """Check the arguments, run the flow, say what happened; the exit code."""
    from das.runs.folder import check_run_id

    config, data, output = args.config, args.data, args.output  # absolute (resolved_path)
    if not config.is_file():
        return _usage_error(f"--config {args.config}: no such file")
    if not data.is_dir():
        return _usage_error(f"--data {args.data}: no such folder")
    if output.exists() and not output.is_dir():
        return _usage_error(f"--output {args.output}: exists and is not a folder")
    if args.run_id is not None:
        try:
            check_run_id(args.run_id)
        except ValueError:
            return _usage_error("--run-id: use letters, digits, '.', '_', '-' (at most 128)")

    if args.ledger is not None:
        from das.trust import LEDGER_ENV, LEDGER_URL_ENV

        saved = {name: os.environ.get(name) for name in (LEDGER_ENV, LEDGER_URL_ENV)}
        os.environ[LEDGER_ENV] = str(args.ledger)
        os.environ.pop(LEDGER_URL_ENV, None)
        try:
            return _run(args)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """:func:`run_command` once the ledger setting is in the environment."""
    from das.runs.folder import RunFolder

    config, data, output = args.config, args.data, args.output
    product = args.run_product
    parameters: dict[str, Any] = {
        "config": str(config),
        "data": str(data),
        "output": str(output),
        "seed": args.seed,
        "run_id": args.run_id,
        "skip_validation": args.skip_validation,
        "cumulative_total": _cumulative(args.cumulative_total),
        "replace_release": args.replace_release,
        "started_from": "cli",
    }
    if product == "safetab-p":
        coterminous = args.coterminous
        parameters["coterminous"] = None if coterminous is None else str(coterminous)
    else:
        parameters["credible_interval"] = args.credible_interval
    from das.runs.faults import EXIT_INFRASTRUCTURE, explain
    from das.trust import LedgerUnavailable

    resume = "run this command again" + (f" with --run-id {args.run_id}" if args.run_id else "")
    try:
        refusal = _preflight(args, parameters)
    except LedgerUnavailable as exc:
        fault = explain(exc, resume)
        print(f"das run {product}: FAILED — {fault.line if fault else exc}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    if refusal is not None:
        print(f"das run {product}: REFUSED — {refusal}", file=sys.stderr)
        return EXIT_USAGE

    from das.cli.server import LocalApiError
    from das.offline import configure_offline

    configure_offline()
    _prewarm_validation(args)
    try:
        announced = _announce_local_api(product)
    except (LocalApiError, OSError) as exc:
        print(f"das run {product}: FAILED — the local Prefect API: {exc}; nothing was drawn",
              file=sys.stderr)  # fmt: skip
        return EXIT_INFRASTRUCTURE
    from das.validation.findings import ValidationFailed
    from flows.runner import chosen_runner, input_bytes, local_workers, task_runner_from_env

    try:
        local_workers()  # (the flow modules build their runner when imported)
        chosen_runner()
    except ValueError as exc:
        print(f"das run {product}: REFUSED — {exc}", file=sys.stderr)
        return EXIT_USAGE
    if product == "safetab-p":
        from flows.safetab_p import safetab_p_flow as product_flow
    else:
        from flows.phsafe import phsafe_flow as product_flow
    from das.cli.progress import shown

    flow = product_flow.with_options(task_runner=task_runner_from_env(inputs=input_bytes(data)))
    try:
        with _start_local_api(product, announced):
            _watch_for_crashes(product)
            with _quiet_tracebacks(), shown(product, verbose=args.verbose):
                state = flow(**parameters, return_state=True)
    except LocalApiError as exc:
        print(f"das run {product}: FAILED — {exc}; nothing was drawn", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    except Exception as exc:  # the flow never ran (e.g. no Prefect API): one line, no traceback
        fault = explain(exc, resume, os.environ.get("PREFECT_API_URL"))
        if fault is None:
            raise
        print(f"das run {product}: FAILED — {fault.line}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    run_id = args.run_id or str(state.state_details.flow_run_id)
    output = Path(str(output).replace("{run_id}", run_id))
    folder = RunFolder(output, run_id)
    if state.name == "Refused":
        print(f"das run {product}: REFUSED — {state.message}", file=sys.stderr)
        return EXIT_USAGE
    if state.is_completed():
        record = state.result()
        banner = ", ".join(record.get("markers") or [])
        mark = f" [{banner}: NOT A PRIVATE RELEASE]" if banner else ""
        print(f"das run {product}: run {run_id} succeeded{mark}; release in {output} "
              f"({(record.get('release') or {}).get('state')})")  # fmt: skip
        return EXIT_OK
    exc = state.result(raise_on_failure=False)
    if isinstance(exc, ValidationFailed):
        print(f"das run {product}: NOT RUN — {exc}", file=sys.stderr)
        return EXIT_FAILED
    fault = None
    if isinstance(exc, BaseException):
        resume = f"run the same command with --run-id {run_id}"
        fault = explain(exc, resume, os.environ.get("PREFECT_API_URL"))
    if fault is not None:
        print(f"das run {product}: FAILED — {fault.line} (run {run_id})", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    where = (
        f"audit {folder.audit_path}, log {folder.log_path}"
        if folder.audit_path.is_file()
        else f"no audit was written; Prefect state: {state.name}"
    )
    detail = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else state.message
    # noise that no longer matches the ledger is never reused: that run cannot go on
    ended = type(exc).__name__ == "NoiseDigestError"
    step = "it cannot be resumed" if ended else f"resume with --run-id {run_id}"
    print(f"das run {product}: FAILED ({detail}); run {run_id}, {step}; {where}",
          file=sys.stderr)  # fmt: skip
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """`das run ...` alone (the full `das` parser registers this module the same way)."""
    parser = argparse.ArgumentParser(prog="das")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
