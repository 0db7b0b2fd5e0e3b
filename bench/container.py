"""Container image: its size and its cold start (issue 35), against a running Docker daemon.

Run: `.venv/bin/python -m bench.container IMAGE [--base BASE_IMAGE] [--runs 7]` on an image built from the
Dockerfile (the container test leaves one as pyramind-test/pyramind:latest, built FROM pyramind-test/bookworm-python:1;
`docker build -t pyramind .` makes one where the registry is reachable).

- size: the image's size, and with `--base` the size of the base image it was built FROM (BASE_IMAGE);
- cold start: `docker run` of a new container on a new volume until GET /health answers 200, `--runs` times (each
  container and volume removed after), and the seconds `docker stop` takes (SIGTERM, exit code 0 expected).
Results: section "Container image" of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import uuid

import httpx


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=300).stdout.strip()


def cold_start(image: str) -> tuple[float, float, int]:
    """Seconds from `docker run` to /health 200; seconds of `docker stop`; the exit code."""
    name = f"pyramind-bench-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    docker("run", "--detach", "--name", name, "--publish", "127.0.0.1::8000", "--volume", f"{name}:/data",
           "--env", "BEARER_TOKEN=bench", image)  # fmt: skip
    try:
        address = docker("port", name, "8000/tcp").split()[0]
        while True:
            try:
                if httpx.get(f"http://{address}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - start > 120:
                raise RuntimeError(f"/health never answered: {docker('logs', name)}")
            time.sleep(0.05)
        ready = time.monotonic() - start
        stop = time.monotonic()
        docker("stop", "--time", "30", name)
        return ready, time.monotonic() - stop, int(docker("inspect", "--format", "{{.State.ExitCode}}", name))
    finally:
        subprocess.run(["docker", "rm", "--force", "--volumes", name], capture_output=True)
        subprocess.run(["docker", "volume", "rm", name], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image")
    parser.add_argument("--base", help="the BASE_IMAGE it was built from (its size is reported beside)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    size = int(docker("image", "inspect", "--format", "{{.Size}}", args.image))
    base = int(docker("image", "inspect", "--format", "{{.Size}}", args.base)) if args.base else None
    runs = [cold_start(args.image) for _ in range(args.runs)]
    ready = [r for r, _, _ in runs]
    result = {
        "image": args.image,
        "size_mb": round(size / 1e6),
        "base": args.base,
        "base_mb": round(base / 1e6) if base is not None else None,
        "ready_s": [round(r, 2) for r in ready],
        "ready_median_s": round(statistics.median(ready), 2),
        "ready_max_s": round(max(ready), 2),
        "stop_s_max": round(max(s for _, s, _ in runs), 2),
        "exit_codes": sorted({c for _, _, c in runs}),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
