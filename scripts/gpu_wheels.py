"""The wheels that scripts/device_check.py needs on a GPU machine without fla and transformer_lens, in one folder.

    python3 scripts/gpu_wheels.py            # into .whl/ (git-ignored): each wheel, why, and the total size
    python3 scripts/device_check.py --json --wheels .whl --out device_check.json    # there, .whl carried along

The GPU machines' image holds torch, triton, transformers and most of the scientific stack (IMAGE_PACKAGES) but
neither flash-linear-attention nor transformer_lens, and reaches no package index. This downloads the wheels of
both, at the versions installed here, for CPython 3.12 on x86-64 Linux, then those of every requirement the image
lacks (or holds at a version the requirement excludes), walked through the wheels' own metadata with the markers
evaluated for that machine. Each requirement is pinned to the version installed here where that satisfies it.
One version of each package: any other wheel in the folder is removed, since device_check.py installs them all.
A few requirements that nothing the check runs imports are left out (LEAVE_OUT says why): a device call carries
64 MiB at most, and wandb alone is 20 MB.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("flash-linear-attention", "transformer-lens")
# the device image 'cuda' (both GPU kinds), as its package list was read on 2026-11-17; --have replaces it
IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
"""
# the versions the image's pip list showed (the others are unknown here and taken to satisfy a requirement)
IMAGE_VERSIONS = {
    "accelerate": "1.15.0", "huggingface-hub": "1.33.0", "jaxtyping": "0.3.11", "numpy": "2.5.2",
    "safetensors": "0.8.0", "sentencepiece": "0.2.2", "tokenizers": "0.23.2", "torch": "2.11.0",
    "transformers": "5.17.0", "triton": "3.6.0",
}  # fmt: skip
LEAVE_OUT = {
    "wandb": "transformer_lens imports it only inside its training helper (tools/training.py), which nothing "
    "here calls; 20 MB and ten more packages of its own",
    "transformers-stream-generator": "no wheel on the index (a source archive only), and transformer_lens "
    "never imports it",
}
# the machine: CPython 3.12 on x86-64 Linux (markers are evaluated for it, wheels downloaded for it)
TARGET = {
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
    "platform_machine": "x86_64", "os_name": "posix", "extra": "",
}  # fmt: skip
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64"]


def image_packages(have: Path | None) -> dict[str, str | None]:
    """name -> version (None: unknown) of what the device image holds: the built-in list, or a file with one
    `name` or `name==version` a line (`python3 -m pip list --format=freeze` there)."""
    if have is None:
        return {canonicalize_name(n): IMAGE_VERSIONS.get(n) for n in IMAGE_PACKAGES.split()}
    out: dict[str, str | None] = {}
    for line in have.read_text().splitlines():
        name, _, version = line.strip().partition("==")
        if name and not name.startswith("#"):
            out[canonicalize_name(name)] = version or None
    return out


def requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist that apply on the target machine (extras' lines evaluate to False there)."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode()
    found = [Requirement(line.split(":", 1)[1]) for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [r for r in found if r.marker is None or r.marker.evaluate(TARGET)]


def pin(req: Requirement) -> str:
    """`name==version` installed here where that satisfies the requirement (what the tests here ran), else the
    requirement itself (pip takes the newest that satisfies it)."""
    try:
        here = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        here = None
    if here is not None and req.specifier.contains(here, prereleases=True):
        return f"{req.name}=={here}"
    return f"{req.name}{req.specifier}"


def download(spec: str, folder: Path) -> Path:
    """One wheel, no dependencies, for the target machine; the path pip saved (or had already saved)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version"]
    command += ["3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(folder), spec]
    done = subprocess.run(command, capture_output=True, text=True)
    saved = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", done.stdout)
    if done.returncode != 0 or not saved:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gpu_wheels: pip could not download a wheel of {spec}: {last}")
    return Path(saved[-1]).resolve()


def collect(folder: Path, image: dict[str, str | None]) -> tuple[dict[str, dict], dict[str, str]]:
    """Walk the requirements from ROOTS: name -> {file, version, needed_by} of each wheel downloaded, and
    name -> why not, for each requirement not downloaded."""
    wanted = [(Requirement(f"{n}=={importlib.metadata.version(n)}"), "the project") for n in ROOTS]
    wheels: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    while wanted:
        req, parent = wanted.pop(0)
        name = canonicalize_name(req.name)
        if name in wheels:
            wheels[name]["needed_by"].append(parent)
            continue
        on_image = image.get(name)
        if name in LEAVE_OUT:
            skipped[name] = f"left out: {LEAVE_OUT[name]}"
        elif name in image and (on_image is None or req.specifier.contains(on_image, prereleases=True)):
            asks = f"{parent} asks {req.specifier or 'any version'}"
            skipped[name] = f"in the image ({on_image or 'version not recorded'}; {asks})"
        else:
            path = download(pin(req), folder)
            version = str(parse_wheel_filename(path.name)[1])
            wheels[name] = {"file": path.name, "version": version, "needed_by": [parent]}
            wanted += [(r, name) for r in requirements(path)]
    return wheels, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT / ".whl", help="the folder (default .whl/, git-ignored)")
    parser.add_argument("--have", type=Path, help="what the image holds: `pip list --format=freeze` there")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    wheels, skipped = collect(args.dir.resolve(), image_packages(args.have))
    keep = {w["file"] for w in wheels.values()}
    for stale in sorted(args.dir.glob("*.whl")):
        if stale.name not in keep:  # another version, or a package no longer needed: device_check installs all
            stale.unlink()
            print(f"removed {stale.name}")
    total = 0
    for _, wheel in sorted(wheels.items()):
        size = (args.dir / wheel["file"]).stat().st_size
        total += size
        print(f"{wheel['file']:<70} {size / 2**20:6.2f} MiB  (needed by {', '.join(wheel['needed_by'])})")
    for name, why in sorted(skipped.items()):
        print(f"  not carried: {name}: {why}")
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB in {args.dir} (a device call carries 64 MiB at most)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
