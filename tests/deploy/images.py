"""Docker as the container test drives it: the CLI, a Python base image built here (no registry is reachable on the
project's machines), the wheelhouse the image installs from, and containers of the image.

- The base: Debian bookworm (Python 3.11) from `debootstrap --variant=minbase` with python3 and python3-venv, imported
  with `docker import` and kept under BASE_TAG, so it is built once per machine.
- The wheels: `pip wheel` of the project and its extras on the host (inside a container, HTTPS to the package index
  fails here), in a folder of the build context that the Dockerfile's WHEELS argument names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_TAG = "pyramind-test/bookworm-python:1"
IMAGE = "pyramind-test/pyramind:latest"
WHEELS = ".wheels-test"  # under ROOT: the build context (gitignored; removed after the build)
EXTRAS = "postgres,openai"  # the Dockerfile's default EXTRAS
# left out of the base: apt's downloaded packages and lists, docs, man pages, locales
TRIMMED = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale")
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Fail (CI=true: .ci/run installs and starts Docker, so the test must run there) or skip with the reason."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: .ci/run installs Docker and starts its daemon)", pytrace=False)
    pytest.skip(reason)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`docker ARGS...`; raises with the command's stderr when it fails and `check`."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-3000:]}")
    return done


def daemon_answers() -> str | None:
    """None when a Docker daemon answers; else why not."""
    if shutil.which("docker") is None:
        return "no docker client on PATH (apt-get install docker.io)"
    try:
        done = docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "the Docker daemon did not answer `docker info` in 30 s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"no Docker daemon answers ({last}); start one as root: dockerd >dockerd.log 2>&1 &"
    return None


def debian_mirror() -> str:
    """The Debian mirror apt uses here (sources.list or deb822 .sources), else deb.debian.org."""
    found = re.compile(r"(https?://\S+/debian)/?(?=\s|$)", re.M)
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            match = found.search(path.read_text())
        except OSError:
            continue
        if match:
            return match.group(1)
    return "http://deb.debian.org/debian"


def build_base_image() -> str:
    """BASE_TAG, built when missing: a bookworm minbase with python3 and python3-venv (apt's caches, docs, man pages
    and locales left out: 124 MB, as python:3.11-slim). Needs root and debootstrap (about 1.5 minutes)."""
    if docker("image", "inspect", BASE_TAG, check=False).returncode == 0:
        return BASE_TAG
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or os.geteuid() != 0:
        unavailable(f"no {BASE_TAG} image, and it is built by debootstrap as root (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="pyramind-rootfs-") as tmp:
        rootfs = Path(tmp)
        done = subprocess.run(
            [debootstrap, "--variant=minbase", "--include=python3,python3-venv", "bookworm", tmp, debian_mirror()],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
        for folder in TRIMMED:
            for entry in (rootfs / folder).glob("*"):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", tmp, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", BASE_TAG], stdin=tar.stdout, capture_output=True, text=True, timeout=300
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
    return BASE_TAG


def build_image(base: str) -> str:
    """IMAGE, built by the repository's Dockerfile from `base` and a wheelhouse of this tree (no package index)."""
    wheels = ROOT / WHEELS
    shutil.rmtree(wheels, ignore_errors=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), f".[{EXTRAS}]"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip wheel failed ({done.returncode}): {done.stderr[-3000:]}")
        docker(
            "build",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--build-arg",
            f"WHEELS={WHEELS}",
            "--tag",
            IMAGE,
            str(ROOT),
            timeout=1200,
        )
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    return IMAGE


class Container:
    """One container of the image, run detached with a unique name; `remove()` deletes it and its anonymous
    volumes. `base` is its HTTP address once published (`publish()`), or given (host network)."""

    def __init__(self, image: str, *options: str, env: dict[str, str]) -> None:
        self.name = f"pyramind-test-{uuid.uuid4().hex[:10]}"
        self.started = time.monotonic()
        flags = [item for key, value in env.items() for item in ("--env", f"{key}={value}")]
        docker("run", "--detach", "--name", self.name, *flags, *options, image)
        self.base = ""

    def published(self, port: int = 8000) -> str:
        """The host address of the container's `port` (published on 127.0.0.1 with a free host port)."""
        out = docker("port", self.name, f"{port}/tcp").stdout.split()
        self.base = f"http://{out[0]}"
        return self.base

    def wait_for_health(self, timeout: float = 60) -> float:
        """Seconds from the `docker run` (or `docker start`) until GET /health answers 200 at `self.base`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.TransportError:
                pass
            if self.state() != "running" or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} is {self.state()}, /health never answered:\n{self.logs()}")
            time.sleep(0.1)

    def wait_for_healthy(self, timeout: float = 60) -> None:
        """Until Docker's own probe (the image's HEALTHCHECK) reports the container healthy."""
        deadline = time.monotonic() + timeout
        while (status := self.inspect("{{.State.Health.Status}}")) != "healthy":
            if self.state() != "running" or time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: health {status}, state {self.state()}:\n{self.logs()}")
            time.sleep(0.25)

    def inspect(self, template: str) -> str:
        return docker("inspect", "--format", template, self.name).stdout.strip()

    def state(self) -> str:
        return self.inspect("{{.State.Status}}")

    def logs(self) -> str:
        done = docker("logs", "--tail", "60", self.name, check=False)
        return done.stdout + done.stderr

    def exec_python(self, code: str, timeout: float = 120) -> str:
        """Run `python -c code` inside the container (its own network namespace); its stdout."""
        return docker("exec", self.name, "python", "-c", code, timeout=timeout).stdout

    def start(self) -> None:
        """`docker start` the stopped container; `wait_for_health` then counts from here."""
        self.started = time.monotonic()
        docker("start", self.name)

    def stop(self) -> tuple[int, float]:
        """SIGTERM (SIGKILL after 30 s): the exit code and the seconds the stop took."""
        start = time.monotonic()
        docker("stop", "--time", "30", self.name, timeout=60)
        return int(self.inspect("{{.State.ExitCode}}")), time.monotonic() - start

    def remove(self) -> None:
        docker("rm", "--force", "--volumes", self.name, check=False)
