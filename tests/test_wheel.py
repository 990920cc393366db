"""The built wheel works outside this checkout: installed into a fresh virtualenv, run from another folder.

Offline: the wheel is built here (``pip wheel --no-build-isolation``) and installed with
``--no-deps --no-index`` into a new venv; its dependencies come from this project's venv through a
``.pth`` line (a path entry only, so the editable attnkit there is not seen), and the wheel's
declared requirement ranges are checked against those installed versions. ``make wheel-check`` (run
by CI) does the networked version: a fresh venv that installs the wheel's ranges from PyPI.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tiny import SHIPPED

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    proj = tmp / "project"  # a copy: the build writes build/ and *.egg-info, and xdist workers may build at once
    shutil.copytree(ROOT / "src", proj / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, proj / f)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            tmp / "dist",
            proj,
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp / "dist").glob("attnkit-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            py,
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            wheel,
        ],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv


def run(venv, *args, cwd, env=None):
    return subprocess.run(
        [venv / "bin" / "attnkit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_the_wheel_carries_the_models_and_declares_ranges(installed):
    wheel, venv = installed
    names = zipfile.ZipFile(wheel).namelist()
    for model in SHIPPED:
        for f in ("config.json", "model.safetensors", "COMPLETE"):
            assert f"attnkit/pretrained/{model}/{f}" in names
    assert "attnkit/pretrained/index.json" in names
    meta = next(n for n in names if n.endswith("METADATA"))
    requires = [
        line.split(":", 1)[1].strip()
        for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert "torch>=2.4" in requires and not any("==" in r for r in requires)  # ranges, not pins
    check = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            """
import importlib.metadata as md, sys
from packaging.requirements import Requirement
bad = []
for r in map(Requirement, md.requires("attnkit")):
    if r.marker is None and not r.specifier.contains(md.version(r.name), prereleases=True):
        bad.append(f"{r} (installed {md.version(r.name)})")
print(md.distribution("attnkit").locate_file(""))
sys.exit("unsatisfied: " + ", ".join(bad) if bad else 0)
""",
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    assert str(venv) in check.stdout  # attnkit itself comes from the wheel, not from this checkout


def test_commands_work_from_an_unrelated_folder(installed, bible_home, tmp_path):
    _, venv = installed
    env = {"ATTNKIT_HOME": str(bible_home)}
    r = run(venv, "--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("attnkit 0.1.0 (torch ")
    r = run(venv, "models", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "transformer-es-en" in r.stdout and "captioner-hard" in r.stdout
    r = run(venv, "translate", "--beam", "1", "Jesús lloró.", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "wept" in r.stdout.lower(), r.stderr
    r = run(
        venv, "translate", "--model", "rnnsearch-es-en", "Y dijo Dios: Sea la luz: y fué la luz.", cwd=tmp_path, env=env
    )
    assert r.returncode == 0 and "light" in r.stdout.lower(), r.stderr
    from PIL import Image

    Image.new("L", (64, 64), 0).save(tmp_path / "blank.png")
    r = run(venv, "caption", "blank.png", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "greedy:" in r.stdout, r.stderr
    r = run(
        venv, "evaluate", "translation", "--model", "rnnencdec-es-en", "--limit", "3", "--json", cwd=tmp_path, env=env
    )
    assert r.returncode == 0 and '"n_sentences": 3' in r.stdout, r.stderr
    assert not (tmp_path / "models").exists()  # nothing looked for a checkout beside the working folder
