"""The explorer's web app: FastAPI on 127.0.0.1, the page and plotly.js served from the
installed packages (no CDN, no web font, no telemetry), and a JSON API over the models.

Every ``/api`` request must carry the per-process token the page was served with (header
``X-Explorer-Token``) and a loopback ``Host``: another site open in the same browser can
neither read the token nor reach the API through DNS rebinding, so it cannot drive the
explorer (which reads parameter folders and writes synthetic populations on this machine).
"""

from __future__ import annotations

import json
import secrets
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from das.resources import demo_specs
from das.specs.config import ConfigError
from das.synth import generate_phsafe, generate_safetab_p
from explorer import params, phsafe, safetab, simulate
from explorer.compare import compare

STATIC = Path(__file__).resolve().parent / "static"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "testserver"})
MAX_SYNTH_PERSONS = 5_000_000
DEFAULT_SPECS = demo_specs("safetab_p")
JsonBody = Annotated[dict[str, Any], Body()]


def plotly_js() -> Path:
    """plotly.min.js shipped inside the plotly wheel (its version pinned in requirements.lock)."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def _error(exc: Exception, status: int = 422) -> JSONResponse:
    return JSONResponse({"error": params.config_error_text(exc)}, status_code=status)


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    return host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"


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

    def guarded(work):
        try:
            return work()
        except (params.ParameterError, ConfigError, ValueError, FileNotFoundError, KeyError) as exc:
            return _error(exc)

    @app.get("/api/presets")
    def presets() -> Any:
        return guarded(lambda: {"presets": params.list_presets(), "default": params.DEFAULT_PRESET})

    @app.get("/api/preset/{preset_id}")
    def preset(preset_id: str) -> Any:
        return guarded(lambda: params.load_preset(preset_id))

    @app.post("/api/load")
    def load(body: JsonBody) -> Any:
        return guarded(lambda: params.load_path(body["path"]))

    @app.post("/api/import")
    def import_config(body: JsonBody) -> Any:
        return guarded(
            lambda: params.import_text(
                body["text"], body.get("name", "config.json"), body.get("safetab_p")
            )
        )

    def evaluate(panel: Any, body: JsonBody) -> Any:
        """One product panel's figures for the page's edited state (same body for both)."""
        return guarded(
            lambda: params.to_transport(
                panel.evaluate(
                    body["state"],
                    float(body.get("delta", 1e-10)),
                    body.get("targets"),
                    body.get("decimals", 6),
                )
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
            lambda: params.to_transport(
                compare(body["product"], body["a"], body["b"], float(body.get("delta", 1e-10)))
            )
        )

    @app.post("/api/export")
    def export(body: JsonBody) -> Any:
        def work() -> Response:
            text = params.export_text(body["product"], body["config"])
            return Response(
                text,
                media_type="application/json",
                headers={"Content-Disposition": 'attachment; filename="config.json"'},
            )

        return guarded(work)

    @app.get("/api/populations")
    def populations() -> Any:
        found = []
        for marker in sorted(workspace.glob(f"*/{simulate.SYNTHETIC_MARKER}")):
            info = json.loads(marker.read_text())
            found.append({**info, "path": str(marker.parent)})
        return {"workspace": str(workspace), "populations": found}

    @app.post("/api/synth")
    def synth(body: JsonBody) -> Any:
        def work() -> dict[str, Any]:
            product = body["product"]
            persons = int(body.get("persons", 50_000))
            seed = int(body.get("seed", 1))
            if not 1 <= persons <= MAX_SYNTH_PERSONS:
                raise params.ParameterError(f"persons must be between 1 and {MAX_SYNTH_PERSONS}")
            folder = workspace / f"{product}-{persons}-seed{seed}"
            if product == "safetab-p":
                specs = Path((body.get("safetab_p") or {}).get("specs") or DEFAULT_SPECS)
                generate_safetab_p(folder, persons, seed, specs, overwrite=True)
            elif product == "phsafe":
                raw = (body.get("phsafe") or {}).get("passes", {}).get("US")
                config_file = workspace / "phsafe-synth-config.json"
                config_file.write_text(params.export_text("phsafe", raw))
                generate_phsafe(folder, persons, seed, config_file, overwrite=True)
            else:
                raise params.ParameterError(f"unknown product {product!r}")
            info = {"product": product, "persons": persons, "seed": seed}
            (folder / simulate.SYNTHETIC_MARKER).write_text(json.dumps(info))
            return {**info, "path": str(folder)}

        return guarded(work)

    @app.post("/api/phsafe/truncation")
    def truncation(body: JsonBody) -> Any:
        def work() -> dict[str, Any]:
            folder = simulate.require_synthetic(body["data_dir"], bool(body.get("confirm")))
            result = phsafe.truncation(body["state"], folder, body.get("pass", "US"))
            return {**result, "synthetic": simulate.is_synthetic(folder), "data_dir": str(folder)}

        return guarded(work)

    @app.post("/api/simulate")
    def start_simulation(body: JsonBody) -> Any:
        def work() -> dict[str, Any]:
            folder = simulate.require_synthetic(body["data_dir"], bool(body.get("confirm")))
            replicates = int(body.get("replicates", 3))
            seed = int(body.get("seed", 1))
            if not 1 <= replicates <= 100:
                raise params.ParameterError("replicates must be between 1 and 100")
            product = body["product"]
            state = body["state"]
            if product == "safetab-p":
                params.safetab_p_config(state["config"])

                def run(progress, checkpoint):
                    return simulate.simulate_safetab_p(
                        state, folder, replicates, seed, progress, checkpoint
                    )
            elif product == "phsafe":
                pass_name = body.get("pass", "US")
                interval = body.get("interval", "equal-tailed")

                def run(progress, checkpoint):
                    return simulate.simulate_phsafe(
                        state, folder, replicates, seed, pass_name, interval, progress, checkpoint
                    )
            else:
                raise params.ParameterError(f"unknown product {product!r}")
            job = jobs.start(product, lambda p, c: params.to_transport(run(p, c)))
            return job.to_dict()

        return guarded(work)

    @app.get("/api/jobs/{job_id}")
    def job_status(job_id: str) -> Any:
        return guarded(lambda: jobs.get(job_id).to_dict())

    @app.post("/api/jobs/{job_id}/cancel")
    def job_cancel(job_id: str) -> Any:
        return guarded(lambda: jobs.cancel(job_id).to_dict())

    return app
