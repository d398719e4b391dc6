"""A national release through ``das run`` (the flow, its tasks, ledger, audit, atomic release),
killed with SIGKILL in a stage and resumed with ``--run-id``.

``benchmarks/national.py`` measures the engine stage by stage; this measures what an operator
runs. It starts ``das run PRODUCT --config C --data D --output O --run-id R`` (secure noise,
its own session), samples the resident memory of the whole process tree (the CLI, the
temporary Prefect API, the Dask worker processes) every 0.2 s, and, with ``--kill-after-step
S``, kills the process group as soon as the run folder's step marker ``S`` appears (e.g.
``combine-cells``: the run is then in its last stage, writing the release). It then runs the
same command again, which resumes the run folder, and reports:

* wall time and peak memory of each attempt (their sum: the end-to-end time);
* draws: every measurement drawn before the kill is reused (``draws.fresh`` of the resumed
  attempt is 0 when the kill came after the measurement stage) and no noise file is
  rewritten (inode, size and mtime of every ``noise/*.npy`` before and after);
* release rows and bytes; for SafeTab-P the release is compared byte for byte with T1/T2
  written again from the run folder by the engine (``write_release_tables``), i.e. from the
  noise drawn before the kill.

Usage (national Parquet input made by ``benchmarks/national.py --format parquet --keep``)::

    .venv/bin/python benchmarks/national_flow.py --product safetab-p \
        --data ../scratch-national/bench/safetab-p-334735000-parquet \
        --output ../scratch-national/flow/out --kill-after-step combine-cells
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from national import TreeSampler, _gib  # noqa: E402

POLL_SECONDS = 0.2


def _noise_files(run_root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        path.name: (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns)
        for path in (run_root / "noise").glob("*.npy")
    }


def _attempt(command: list[str], run_root: Path, kill_after: str | None) -> dict[str, Any]:
    """One ``das run``; killed (SIGKILL to its process group) once ``steps/<kill_after>.json``
    exists."""
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env["DAS_LOCAL_API"] = "temporary"  # the run's own API, in its tree (not `das server`'s)
    started = time.time()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    sampler = TreeSampler(process.pid)
    sampler.start()
    killed = False
    marker = run_root / "steps" / f"{kill_after}.json"
    while process.poll() is None:
        if kill_after and marker.is_file():
            os.killpg(process.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(POLL_SECONDS)
    output, _ = process.communicate()
    ended = time.time()
    sampler.stopped.set()
    sampler.join()
    if killed:  # the tree's other process groups (none expected): wait for the group to go
        time.sleep(1)
    return {
        "wall_s": round(ended - started, 1),
        "peak_rss": sampler.peak(started, ended),
        "exit": process.returncode,
        "killed_after": kill_after if killed else None,
        "tail": output.strip().splitlines()[-3:],
    }


def _tree_bytes(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*.txt"))
    }


def _rewrite_safetab_p(config: Path, data: Path, run_root: Path) -> dict[str, str]:
    """T1/T2 written again by the engine from the run folder (no draw: the noise is read)."""
    from das.safetab_p.parameters import load_parameters
    from das.safetab_p.spill import WorkFolder
    from das.safetab_p.streamed import write_release_tables

    parameters = load_parameters(config)
    with tempfile.TemporaryDirectory(dir=run_root) as staging:
        write_release_tables(
            parameters.config, parameters.specs, WorkFolder(run_root / "work"), staging
        )
        return _tree_bytes(Path(staging))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--product", choices=("safetab-p", "phsafe"), default="safetab-p")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--config", type=Path, help="default: DATA/config.json")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--run-id", default="national")
    parser.add_argument("--kill-after-step", help="SIGKILL the run when this step is done")
    parser.add_argument(
        "--resume", action="store_true",
        help="only resume the run in OUTPUT (e.g. one killed by an earlier call)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    data = args.data.resolve()
    config = (args.config or data / "config.json").resolve()
    output = args.output.resolve()
    run_root = output.with_name(output.name + ".das") / "runs" / args.run_id
    if args.resume != run_root.is_dir() or output.exists():
        sys.exit(f"{output}: a published release, or no run folder to resume (--resume) / "
                 "a run folder already there (without --resume)")  # fmt: skip
    # A measurement, not a release: the run's ledger is its own, beside the output.
    ledger = output.with_name(output.name + ".ledger")
    command = [
        sys.executable, "-m", "das", "run", args.product, "--config", str(config),
        "--data", str(data), "--output", str(output), "--run-id", args.run_id,
        "--ledger", str(ledger),
    ]  # fmt: skip
    print("$", " ".join(command), flush=True)
    if args.resume:
        noise_at_kill = _noise_files(run_root)
        attempts = [_attempt(command, run_root, None)]
    else:
        attempts = [_attempt(command, run_root, args.kill_after_step)]
        noise_at_kill = _noise_files(run_root)
    print(json.dumps(attempts[-1]), flush=True)
    if attempts[-1]["killed_after"]:
        attempts.append(_attempt(command, run_root, None))
        print(json.dumps(attempts[-1]), flush=True)
    result: dict[str, Any] = {
        "product": args.product,
        "attempts": attempts,
        "end_to_end_s": round(sum(a["wall_s"] for a in attempts), 1),
        "peak_rss": max(a["peak_rss"] for a in attempts),
    }
    if attempts[-1]["exit"] == 0:
        audit = json.loads((output / "audit.json").read_text())
        after = _noise_files(run_root)
        result["draws_last_attempt"] = audit["draws"]
        result["noise_files"] = len(after)
        result["noise_rewritten"] = sorted(
            name for name, stat in noise_at_kill.items() if after.get(name) != stat
        )
        result["release_bytes"] = sum(p.stat().st_size for p in output.rglob("*") if p.is_file())
        result["stages_s_last_attempt"] = {
            name: round(seconds, 1) for name, seconds in audit["timings"].items()
        }
        if args.product == "safetab-p":
            released = _tree_bytes(output)
            result["release_files"] = sorted(released)
            result["byte_identical_to_rewrite"] = released == _rewrite_safetab_p(
                config, data, run_root
            )
    print(json.dumps(result, indent=1))
    print(
        f"end to end {result['end_to_end_s'] / 60:.1f} min, peak {_gib(result['peak_rss'])}",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if attempts[-1]["exit"] != 0:
        sys.exit(1)
    shutil.rmtree(run_root / "work", ignore_errors=True)


if __name__ == "__main__":
    main()
