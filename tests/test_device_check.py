"""scripts/device_check.py: its dry run (automatic without CUDA) says, as JSON, what it would run and skip, and
which carried wheels (--wheels) it would install; a folder without wheels or a failing pip stops it in one line."""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


device_check, gpu_wheels = _script("device_check"), _script("gpu_wheels")


def test_dry_run_lists_the_cuda_tests_the_wheels_and_what_it_skips(capsys, tmp_path):
    (tmp_path / "fakepkg-1.2.3-py3-none-any.whl").write_bytes(b"")  # a dry run reads the names only
    assert device_check.main(["--dry-run", "--json", "--wheels", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True and set(report["skipped"]) == {"tests", "parity", "bench", "gpu"}
    gpu = report["gpu_plan"]  # benchmarks/gpu.py --dry-run, run by the check
    assert gpu["dry_run"] is True and set(gpu["would_run"]) == {"machine", "deltanet", "qwen3_5", "recipe"}
    assert report["facts"]["cuda"] == torch.cuda.is_available()
    ids = report["cuda_tests"]["ids"]
    assert report["cuda_tests"]["count"] == len(ids) >= 40
    assert any("shipped_checkpoints" in t for t in ids) and any("bf16_autocast" in t for t in ids)
    wheels = report["wheels"]
    assert wheels["installed"] is False and wheels["would_install"] == ["fakepkg==1.2.3"]
    assert "--no-index --no-deps" in wheels["command"] and "fakepkg-1.2.3-py3-none-any.whl" in wheels["command"]
    assert report["command"] == f"python3 scripts/device_check.py --json --wheels {tmp_path}"


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_no_wheels_stops_the_check_in_one_line(capsys, tmp_path, folder):
    wheels = tmp_path / folder
    if folder == "empty":
        wheels.mkdir()
        (wheels / "notes.txt").write_text("not a wheel")
    out = tmp_path / "report.json"
    assert device_check.main(["--dry-run", "--json", "--wheels", str(wheels), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    why = "no such folder" if folder == "missing" else "no .whl file in it"
    assert captured.err.strip() == f"device_check: --wheels {wheels}: {why} (python3 scripts/gpu_wheels.py makes them)"
    report = json.loads(out.read_text())
    assert report == json.loads(captured.out) and report["wheels"]["error"] == captured.err.strip()[14:]
    assert "facts" not in report  # stopped before anything imported fla or transformer_lens


def test_two_versions_of_one_package_are_refused(tmp_path):
    for name in ("fla_core-0.5.0-py3-none-any.whl", "fla_core-0.6.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    assert device_check.wheel_plan(tmp_path)["error"] == f"--wheels {tmp_path}: two versions of fla-core"


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal real wheel of `name` (module of the same name) requiring `requires`."""
    stem = f"{name.replace('-', '_')}-{version}"
    path, info = folder / f"{stem}-py3-none-any.whl", f"{stem}.dist-info"
    needs = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name.replace('-', '_')}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{needs}",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in [*files, f"{info}/RECORD"]))
    return path


def test_installed_wheels_come_first_for_this_process_and_its_children(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the install puts its folder first; undone after the test
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    _wheel(tmp_path, "fakepkg-dc", "1.2.3", ["surely-not-installed-dc>=1", 'pytest; extra == "test"'])
    result = device_check.install_wheels(tmp_path, dry_run=False)
    assert result["installed"] is True and result["wheels"] == [
        {"name": "fakepkg_dc", "version": "1.2.3", "file": "fakepkg_dc-1.2.3-py3-none-any.whl"}
    ]
    site = result["site"]
    assert sys.path[0] == site and os.environ["PYTHONPATH"] == f"{site}{os.pathsep}/somewhere/else"
    child = subprocess.run([sys.executable, "-c", "import fakepkg_dc; print(fakepkg_dc.VALUE)"], capture_output=True)
    assert child.stdout.strip() == b"42"
    assert result["unmet_requirements"] == ["fakepkg-dc needs surely-not-installed-dc>=1: absent"]


def test_a_failing_pip_is_one_error(tmp_path):
    (tmp_path / "fakepkg-1.2.3-py3-none-any.whl").write_bytes(b"not a zip file")
    result = device_check.install_wheels(tmp_path, dry_run=False)
    assert result["error"].startswith(f"pip could not install the wheels of {tmp_path} (exit ")
    assert "installed" not in result and result["install_s"] >= 0


# what each fake package needs: the walk of gpu_wheels.py follows these instead of PyPI's (no network in tests)
FAKE_INDEX = {
    "flash-linear-attention": ["fla-core==0.6.0", "transformers<6,>=5.6.2", 'pytest; extra == "test"'],
    "fla-core": ["einops"],
    "transformer-lens": [
        "datasets>=2.7.1", "wandb>=0.13.5", "transformers>=5.9.0",
        "numpy>=3; python_version >= '3.12'",  # the image's numpy is 2.5.2: carried
        "tomli; python_version < '3.11'",  # not on the machine's Python 3.12
    ],
    "datasets": ["dill<0.4.2", "multiprocess"],
    "multiprocess": ["dill"],
    "dill": [],
    "numpy": [],
}  # fmt: skip


def test_the_wheel_walk_carries_what_the_image_lacks(tmp_path, monkeypatch):
    def download(spec: str, folder: Path) -> Path:
        req = gpu_wheels.Requirement(spec)
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        return _wheel(folder, req.name, pinned[0] if pinned else "3.0.0", FAKE_INDEX[req.name])

    monkeypatch.setattr(gpu_wheels, "download", download)
    wheels, skipped = gpu_wheels.collect(tmp_path, gpu_wheels.image_packages(None))
    carried = {"flash-linear-attention", "fla-core", "transformer-lens", "datasets", "multiprocess", "dill", "numpy"}
    assert set(wheels) == carried
    assert wheels["numpy"]["version"] == "3.0.0" and wheels["fla-core"]["version"] == "0.6.0"
    assert wheels["dill"]["needed_by"] == ["datasets", "multiprocess"]
    assert set(skipped) == {"einops", "transformers", "wandb"}  # no pytest (an extra), no tomli (Python < 3.11)
    assert skipped["transformers"].startswith("in the image (5.17.0;") and skipped["wandb"].startswith("left out")
