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

import copy
import logging
import shutil
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


def run_suites(batches: list[tuple[Suite, pd.DataFrame]], docs_dir: Path | None) -> list[GxOutcome]:
    """Validate each (suite, sample frame) with GX; render Data Docs into ``docs_dir``.

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
        logger.info(
            "GX suite %s: %s on %d rows (%d expectations, %d failed)",
            suite.name,
            "passed" if outcome.success else "FAILED",
            outcome.rows,
            outcome.expectations,
            len(outcome.failures),
        )
        outcomes.append(outcome)
    if docs_dir is not None:
        # Once for all suites (GX renders its index and every page again at each build: a
        # build per suite, as the checkpoint action does, cost 4 of the 5 s of validation)
        context.build_data_docs(site_names=[DATA_DOCS_SITE])
    return outcomes
