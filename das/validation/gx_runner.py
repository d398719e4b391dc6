"""Run the reviewed suites with Great Expectations and build its Data Docs, offline.

An ephemeral GX context (nothing written outside the report folder, no telemetry:
:func:`das.offline.configure_offline` runs before ``great_expectations`` is imported) gets one
pandas data asset per input file, the suite loaded from its JSON, and a checkpoint whose
``UpdateDataDocsAction`` renders the validation result into ``<report>/data_docs/`` (GX's
own static site: ``index.html`` plus one page per suite and per validation run). The
context's default Data Docs site (a temporary folder) is removed first.

GX sees each file's sample (see :mod:`das.validation.scan`): the whole file when small, else a
systematic sample plus the rows the engine flagged. Its results are returned per suite so the
caller can report them next to the engine's.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import json
import logging
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from das.offline import configure_offline
from das.validation.findings import short_value
from das.validation.suites import Suite

DATA_DOCS_SITE = "das_validation"
PARTIAL_UNEXPECTED = 10

logger = logging.getLogger("das.validation")


@dataclass
class GxFailure:
    """One failed expectation on the sample GX evaluated."""

    type: str
    column: str | None
    unexpected_count: int
    rows: list[int] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    error: str | None = None  # set when the expectation raised instead of evaluating


@dataclass
class GxOutcome:
    """The result of one suite on one file's sample."""

    suite: str
    success: bool
    rows: int
    expectations: int
    failures: list[GxFailure] = field(default_factory=list)


def _column_label(kwargs: dict[str, Any]) -> str | None:
    if "column_list" in kwargs and "column" not in kwargs:
        return ",".join(kwargs["column_list"])
    return kwargs.get("column")


def _rows(index_list: list[Any] | None) -> list[int]:
    rows = []
    for item in index_list or []:
        if isinstance(item, dict):
            item = item.get("row")
        if isinstance(item, int | float):
            rows.append(int(item))
    return rows


def _values(values: list[Any] | None) -> list[str]:
    shown = []
    for value in values or []:
        if isinstance(value, dict):
            value = "|".join(str(v) for v in value.values())
        shown.append(short_value(value))
    return shown


GX_VALUE_LIMIT = 64  # longer than any valid field of the production files


def _cut_long_values(frame: pd.DataFrame) -> pd.DataFrame:
    """The GX sample with every value longer than any valid field cut to a prefix (still
    invalid, so every expectation gives the same verdict), so that Data Docs never copy a huge
    bad value whole; the engine checks the full values."""
    cut = {}
    for column in frame.columns:
        values = frame[column]
        if not pd.api.types.is_string_dtype(values):
            continue
        long = values.str.len() > GX_VALUE_LIMIT
        if long.any():
            cut[column] = values.where(~long, values.str.slice(0, GX_VALUE_LIMIT) + "…")
    return frame.assign(**cut) if cut else frame


class PrewarmedGx:
    """A process that imports Great Expectations ahead of time (2-3 s of imports, 4-8 s on a
    loaded machine) and then runs one :func:`run_suites` for this process: `das run` starts it
    first, so that the import runs on the other core while the run starts, not in its
    validation. It receives the samples over a pipe, as a Dask worker process would, and
    writes the Data Docs itself; a worker that fails is reported and the suites run here."""

    def __init__(self) -> None:
        import atexit
        import subprocess
        import sys
        import tempfile

        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            # imported as itself, not run as __main__: its answer pickles GxOutcome by name
            [sys.executable, "-c", "from das.validation.gx_runner import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
        )
        atexit.register(self.close)  # never used (a refusal, skipped validation): ended

    def run(
        self, batches: list[tuple[Suite, pd.DataFrame]], docs_dir: Path | None
    ) -> list[GxOutcome]:
        """:func:`run_suites` in the worker; :class:`RuntimeError` when it fails."""
        import pickle

        request = pickle.dumps((batches, None if docs_dir is None else Path(docs_dir).absolute()))
        answer, _ = self.process.communicate(request, timeout=PREWARMED_TIMEOUT_SECONDS)
        if self.process.returncode != 0:
            self._errors.seek(0)
            tail = self._errors.read()[-2000:].decode("utf-8", "replace")
            raise RuntimeError(f"exit {self.process.returncode}: {tail}")
        return pickle.loads(answer)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._errors.close()


PREWARMED_TIMEOUT_SECONDS = 3600.0
_prewarmed: PrewarmedGx | None = None


def prewarm() -> None:
    """Start this process's :class:`PrewarmedGx` (used by the next :func:`run_suites` here)."""
    global _prewarmed
    if _prewarmed is None:
        _prewarmed = PrewarmedGx()


# The verdicts of the last few validations in this process, by what they checked
# (:func:`_sample_key`): GX gives the same verdict and the same pages for the same samples
# under the same suites, so a process that validates the same records again (the test
# suite's, `das demo`'s validation and then its runs) reuses them instead of running GX again
# (0.6-0.7 CPU-s for the six SafeTab-P files of the toy inputs). In memory only: the samples'
# values never go anywhere new.
REMEMBERED = 4
_remembered: collections.OrderedDict[str, tuple[list[GxOutcome], dict[str, bytes] | None]] = (
    collections.OrderedDict()
)
_remembered_lock = threading.Lock()  # validations may run on several threads of a process


def _sample_key(batches: list[tuple[Suite, pd.DataFrame]], docs: bool) -> str:
    """What decides GX's verdicts and pages, in a SHA-256: its version, each suite's rules,
    each sample's columns, types, row numbers and values, and whether Data Docs are made."""
    from importlib.metadata import version

    digest = hashlib.sha256(json.dumps([version("great_expectations"), docs]).encode())
    for suite, frame in batches:
        shape = [
            suite.name,
            suite.data,
            list(map(str, frame.columns)),
            list(map(str, frame.dtypes)),
        ]
        digest.update(json.dumps(shape, sort_keys=True, default=str).encode())
        digest.update(len(frame).to_bytes(8, "little"))
        # Every value itself, not pandas' 64-bit row hashes (whose key is public: a sample made
        # to collide with an earlier one would get its verdict), which are missing, and in an
        # object column each value's type (an int and its digits write alike in CSV).
        digest.update(frame.to_csv(index=True).encode("utf-8", "surrogatepass"))
        digest.update(frame.isna().to_numpy().tobytes())
        mixed = frame[[column for column in frame.columns if frame[column].dtype == object]]
        digest.update(mixed.map(lambda value: type(value).__name__).to_csv().encode())
    return digest.hexdigest()


def _remembered_run(key: str, docs_dir: Path | None) -> list[GxOutcome] | None:
    """The remembered outcomes of ``key`` (its Data Docs written into ``docs_dir``), or None."""
    with _remembered_lock:
        entry = _remembered.get(key)
        if entry is None:
            return None
        _remembered.move_to_end(key)
    outcomes, pages = entry
    if docs_dir is not None and pages is not None:
        docs_dir = Path(docs_dir).absolute()
        if docs_dir.exists():
            shutil.rmtree(docs_dir)
        for name, content in pages.items():
            page = docs_dir / name
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_bytes(content)
    return copy.deepcopy(outcomes)


def _remember(key: str, outcomes: list[GxOutcome], docs_dir: Path | None) -> None:
    if REMEMBERED <= 0:
        return
    pages = None
    if docs_dir is not None:
        root = Path(docs_dir).absolute()
        pages = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with _remembered_lock:
        _remembered[key] = (copy.deepcopy(outcomes), pages)
        while len(_remembered) > REMEMBERED:
            _remembered.popitem(last=False)


def run_suites(batches: list[tuple[Suite, pd.DataFrame]], docs_dir: Path | None) -> list[GxOutcome]:
    """Validate each (suite, sample frame) with GX; render Data Docs into ``docs_dir``; in the
    prewarmed process when this process started one (:func:`prewarm`), else here; or, for
    samples this process validated already under the same suites, that validation's verdicts
    and pages again."""
    global _prewarmed
    key = _sample_key(batches, docs_dir is not None) if REMEMBERED > 0 else ""
    reused = _remembered_run(key, docs_dir) if key else None
    if reused is not None:
        if _prewarmed is not None:
            _prewarmed.close()
            _prewarmed = None
        for outcome in reused:
            _log_outcome(outcome, reused=True)
        return reused
    outcomes = _run_suites_once(batches, docs_dir)
    if key:
        _remember(key, outcomes, docs_dir)
    return outcomes


def _run_suites_once(
    batches: list[tuple[Suite, pd.DataFrame]], docs_dir: Path | None
) -> list[GxOutcome]:
    """GX's verdicts on ``batches``: in the prewarmed process, else here."""
    global _prewarmed
    worker, _prewarmed = _prewarmed, None
    if worker is not None:
        try:
            outcomes = worker.run(batches, docs_dir)
        except Exception as exc:  # the suites still run, here
            logger.warning("the prewarmed Great Expectations process failed (%s): running "
                           "the suites in this process", exc)  # fmt: skip
        else:
            for outcome in outcomes:
                _log_outcome(outcome)
            return outcomes
        finally:
            worker.close()
    outcomes = _run_suites(batches, docs_dir)
    for outcome in outcomes:
        _log_outcome(outcome)
    return outcomes


def _log_outcome(outcome: GxOutcome, reused: bool = False) -> None:
    logger.info(
        "GX suite %s: %s on %d rows (%d expectations, %d failed)%s",
        outcome.suite,
        "passed" if outcome.success else "FAILED",
        outcome.rows,
        outcome.expectations,
        len(outcome.failures),
        " (the same sample and suite as an earlier validation in this process: its verdict "
        "and Data Docs reused)"
        if reused
        else "",
    )


def _run_suites(
    batches: list[tuple[Suite, pd.DataFrame]], docs_dir: Path | None
) -> list[GxOutcome]:
    """:func:`run_suites` in this process.

    ``docs_dir`` is emptied first (it belongs to the report); None skips the Data Docs. A
    relative ``docs_dir`` is taken against the working directory: GX's ephemeral context has
    no root folder, so its Data Docs store refuses a relative base directory.
    """
    configure_offline()
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    from das.validation.data_docs import site_views

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    for site in list(context.get_site_names()):
        context.delete_data_docs_site(site)
    if docs_dir is not None:
        docs_dir = Path(docs_dir).absolute()
        if docs_dir.exists():
            shutil.rmtree(docs_dir)
        docs_dir.mkdir(parents=True)
        context.add_data_docs_site(
            site_name=DATA_DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                **site_views(),
            },
        )
    source = context.data_sources.add_pandas("das_inputs")
    outcomes = []
    for suite, frame in batches:
        frame = _cut_long_values(frame)
        asset = source.add_dataframe_asset(name=suite.name)
        batch = asset.add_batch_definition_whole_dataframe(f"{suite.name} rows")
        gx_suite = context.suites.add(gx.ExpectationSuite(**copy.deepcopy(suite.data)))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=suite.name, data=batch, suite=gx_suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=f"validate {suite.name}",
                validation_definitions=[definition],
                result_format={
                    "result_format": "SUMMARY",
                    "partial_unexpected_count": PARTIAL_UNEXPECTED,
                },
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": frame})
        outcome = GxOutcome(
            suite=suite.name, success=bool(result.success), rows=len(frame), expectations=0
        )
        for run in result.run_results.values():
            for item in run.results:
                outcome.expectations += 1
                if item.success:
                    continue
                config = item.expectation_config
                info = item.exception_info or {}
                raised = bool(info.get("raised_exception"))
                details = item.result or {}
                outcome.failures.append(
                    GxFailure(
                        type=config.type,
                        column=_column_label(dict(config.kwargs)),
                        unexpected_count=int(details.get("unexpected_count") or 0),
                        rows=_rows(details.get("partial_unexpected_index_list")),
                        values=_values(details.get("partial_unexpected_list")),
                        error=str(info.get("exception_message")) if raised else None,
                    )
                )
        outcomes.append(outcome)
    if docs_dir is not None:
        # Once for all suites (GX renders its index and every page again at each build: a
        # build per suite, as the checkpoint action does, cost 4 of the 5 s of validation)
        context.build_data_docs(site_names=[DATA_DOCS_SITE])
    return outcomes


def _serve() -> None:
    """The process of :class:`PrewarmedGx`: import GX now, then run the one request that it
    sends on stdin and answer on stdout."""
    import pickle
    import sys

    configure_offline()
    import great_expectations  # noqa: F401

    import das.validation.data_docs  # noqa: F401

    batches, docs_dir = pickle.loads(sys.stdin.buffer.read())
    answer = pickle.dumps(_run_suites(batches, docs_dir))
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
