"""The explorer's web app: FastAPI on 127.0.0.1, the page and plotly.js served from the
installed packages (no CDN, no web font, no telemetry), and a JSON API over the models.

Every ``/api`` request must carry the per-process token the page was served with (header
``X-Explorer-Token``) and a loopback ``Host``: another site open in the same browser can
neither read the token nor reach the API through DNS rebinding, so it cannot drive the
explorer (which reads parameter folders and writes synthetic populations on this machine).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from das.specs.config import ConfigError
from explorer import params, phsafe, populations, safetab, simulate
from explorer.compare import compare

STATIC = Path(__file__).resolve().parent / "static"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "testserver"})
MAX_REPLICATES = 100
JsonBody = Annotated[dict[str, Any], Body()]
# What parameters the engine cannot evaluate raise: answered 422 with the message, never 500.
# ConfigError and ParameterError are ValueErrors; budgets far out of range overflow or divide
# by zero; a request of the wrong shape gives Key/Type/Attribute/IndexError; a path, OSError.
UNUSABLE_PARAMETERS = (
    ConfigError,
    ValueError,
    ArithmeticError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    OSError,
)
LOG = logging.getLogger("explorer")


def plotly_js() -> Path:
    """plotly.min.js shipped inside the plotly wheel (its version pinned in requirements.lock)."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def _error(exc: Exception, status: int = 422) -> JSONResponse:
    return JSONResponse({"error": params.config_error_text(exc)}, status_code=status)


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    return host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"


def guarded(work: Callable[[], Any]) -> Response:
    """Run an endpoint's work and render its JSON; parameters it cannot use give 422 with a
    readable message (rendering is inside, so a figure JSON cannot hold is caught too)."""
    try:
        result = work()
        if isinstance(result, Response):
            return result
        return JSONResponse(params.to_transport(result))
    except UNUSABLE_PARAMETERS as exc:
        if not isinstance(exc, params.ParameterError | ConfigError):
            LOG.info("parameters refused: %s: %s", type(exc).__name__, exc)
        return _error(exc)


def field(body: dict[str, Any], name: str) -> Any:
    """A required field of a request body."""
    if not isinstance(body, dict) or name not in body:
        raise params.ParameterError(f"the request has no {name!r}")
    return body[name]


def delta_of(body: dict[str, Any]) -> float:
    """The δ of the (ε, δ) conversions, strictly between 0 and 1."""
    value = body.get("delta", 1e-10)
    try:
        delta = float(value)
    except (TypeError, ValueError):
        raise params.ParameterError(f"δ must be a number, got {value!r}") from None
    if not 0 < delta < 1:
        raise params.ParameterError(f"δ must be strictly between 0 and 1, got {value!r}")
    return delta


def decimals_of(body: dict[str, Any]) -> int | None:
    """Decimals solved budgets are rounded to: a whole number 0–15, or null (no rounding)."""
    value = body.get("decimals", 6)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise params.ParameterError(f"decimals must be a whole number from 0 to 15, got {value!r}")
    if value != int(value) or not 0 <= value <= 15:
        raise params.ParameterError(f"decimals must be a whole number from 0 to 15, got {value!r}")
    return int(value)


def whole(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """A whole-number field within [low, high]."""
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise params.ParameterError(f"{name} must be a whole number, got {value!r}")
    if value != int(value) or not low <= value <= high:
        raise params.ParameterError(f"{name} must be a whole number from {low} to {high:,}")
    return int(value)


def export_name(product: str, raw: dict[str, Any]) -> str:
    """The download name of an export: product and pass (``das run`` wants it renamed
    config.json, beside the spec files)."""
    if product == "safetab-p":
        return "safetab-p-config.json"
    return f"phsafe-{params.phsafe_config(raw, 'export').pass_name.lower()}-config.json"


def create_app(workspace: Path, token: str | None = None) -> FastAPI:
    """The app; synthetic populations are written under ``workspace``."""
    token = token or secrets.token_urlsafe(24)
    workspace.mkdir(parents=True, exist_ok=True)
    jobs = simulate.JobManager()
    app = FastAPI(title="DAS tuning explorer", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.token = token
    app.state.workspace = workspace

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if _host_name(request) not in LOOPBACK_HOSTS:
            return JSONResponse({"error": "the explorer answers on loopback only"}, 403)
        if request.url.path.startswith("/api/") and not secrets.compare_digest(
            request.headers.get("x-explorer-token", ""), token
        ):
            return JSONResponse({"error": "missing or wrong X-Explorer-Token"}, 403)
        response = await call_next(request)
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' "
            "'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'"
        )
        return response

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        page = (STATIC / "index.html").read_text(encoding="utf-8")
        return page.replace("__EXPLORER_TOKEN__", token)

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        path = (STATIC / name).resolve()
        if path.parent != STATIC or not path.is_file():
            return Response(status_code=404)
        return FileResponse(path)

    @app.get("/vendor/plotly.min.js")
    def plotly() -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript")

    @app.get("/api/presets")
    def presets() -> Any:
        return guarded(lambda: {"presets": params.list_presets(), "default": params.DEFAULT_PRESET})

    @app.get("/api/preset/{preset_id}")
    def preset(preset_id: str) -> Any:
        return guarded(lambda: params.load_preset(preset_id))

    @app.post("/api/load")
    def load(body: JsonBody) -> Any:
        return guarded(lambda: params.load_path(str(field(body, "path"))))

    @app.post("/api/import")
    def import_config(body: JsonBody) -> Any:
        return guarded(
            lambda: params.import_text(
                str(field(body, "text")),
                str(body.get("name", "config.json")),
                body.get("safetab_p"),
            )
        )

    def evaluate(panel: Any, body: JsonBody) -> Any:
        """One product panel's figures for the page's edited state (same body for both)."""
        return guarded(
            lambda: panel.evaluate(
                field(body, "state"), delta_of(body), body.get("targets"), decimals_of(body)
            )
        )

    @app.post("/api/safetab-p/evaluate")
    def safetab_evaluate(body: JsonBody) -> Any:
        return evaluate(safetab, body)

    @app.post("/api/phsafe/evaluate")
    def phsafe_evaluate(body: JsonBody) -> Any:
        return evaluate(phsafe, body)

    @app.post("/api/compare")
    def compare_sets(body: JsonBody) -> Any:
        return guarded(
            lambda: compare(
                field(body, "product"), field(body, "a"), field(body, "b"), delta_of(body)
            )
        )

    @app.post("/api/export")
    def export(body: JsonBody) -> Any:
        def work() -> Response:
            product, config = field(body, "product"), field(body, "config")
            text = params.export_text(product, config)
            return Response(
                text,
                media_type="application/json",
                headers={
                    "Content-Disposition": (
                        f'attachment; filename="{export_name(product, config)}"'
                    )
                },
            )

        return guarded(work)

    @app.get("/api/populations")
    def population_list() -> Any:
        return guarded(lambda: populations.list_populations(workspace))

    @app.post("/api/synth")
    def synth(body: JsonBody) -> Any:
        return guarded(
            lambda: populations.synthesize(
                workspace,
                field(body, "product"),
                body.get("persons", 50_000),
                body.get("seed", 1),
                body.get("safetab_p"),
                body.get("phsafe"),
            )
        )

    @app.post("/api/phsafe/truncation")
    def truncation(body: JsonBody) -> Any:
        def work() -> dict[str, Any]:
            folder = populations.require_population(workspace, body.get("data_dir"), "phsafe")
            result = phsafe.truncation(field(body, "state"), folder, body.get("pass", "US"))
            return {**result, "data_dir": str(folder)}

        return guarded(work)

    @app.post("/api/simulate")
    def start_simulation(body: JsonBody) -> Any:
        def work() -> dict[str, Any]:
            product = field(body, "product")
            if product not in populations.PRODUCTS:
                raise params.ParameterError(f"unknown product {product!r}")
            replicates = whole(body, "replicates", 3, 1, MAX_REPLICATES)
            seed = whole(body, "seed", 1, 0, 2**32 - 1)
            state = field(body, "state")
            folder = populations.require_population(workspace, body.get("data_dir"), product)
            detail = f"{replicates} replicate{'s' if replicates != 1 else ''}"
            if product == "safetab-p":
                params.safetab_p_config(field(state, "config"))
                title = "SafeTab-P simulation"

                def run(progress, checkpoint):
                    return simulate.simulate_safetab_p(
                        state, folder, replicates, seed, progress, checkpoint
                    )
            else:
                pass_name = body.get("pass", "US")
                interval = body.get("interval", "equal-tailed")
                title = f"PHSafe {pass_name} simulation"

                def run(progress, checkpoint):
                    return simulate.simulate_phsafe(
                        state, folder, replicates, seed, pass_name, interval, progress, checkpoint
                    )

            job = jobs.start(product, lambda p, c: params.to_transport(run(p, c)), title, detail)
            return job.to_dict()

        return guarded(work)

    @app.get("/api/jobs/{job_id}")
    def job_status(job_id: str) -> Any:
        return guarded(lambda: jobs.get(job_id).to_dict())

    @app.post("/api/jobs/{job_id}/cancel")
    def job_cancel(job_id: str) -> Any:
        return guarded(lambda: jobs.cancel(job_id).to_dict())

    return app
