"""An arm64 Python with the pinned torch and executorch, run on this x86 machine under qemu user-mode emulation.

    python tools/arm64/env.py build            # once: about 4 GB in $OMNIDRAFT_HOME/arm64, a few minutes
    python tools/arm64/env.py run -- -c "import platform; print(platform.machine())"

Built from Debian's packages and PyPI only:
  1. qemu-user-static and debootstrap: `apt-get download`, unpacked into the cache (the
     machine's own packages are untouched). binfmt_misc is not mounted here, so the
     emulator is called explicitly: `qemu-aarch64-static -cpu CPU -L ROOT ROOT/usr/bin/python3.11`.
  2. An arm64 Debian 12 root with Python 3.11: debootstrap's first stage downloads the
     packages, which are unpacked with dpkg-deb (the second stage would have to run arm64
     code through binfmt_misc; nothing here needs the packages configured).
  3. The aarch64 wheels of torch==2.13.0 and executorch==1.5.1 and what the runtime imports,
     installed from the host with `pip install --target --platform manylinux_..._aarch64`.
     PyPI's aarch64 torch 2.13.0 is a CUDA build: its libraries link the CUDA runtime
     libraries (3 GB of wheels), which are installed only so that torch loads; no GPU is used.
  4. The emulated phone CPU's description: qemu passes the host's /proc/cpuinfo through,
     which an arm64 cpuinfo library cannot parse (torch's import crashes), so the root gets
     an arm64 /proc/cpuinfo and CPU lists in /sys for the emulated core (qemu's -L prefix
     serves the root's files first). ISA features come from qemu's auxiliary vector, so
     XNNPACK picks the kernels of the emulated core: `a76` (Cortex-A76: NEON with dot
     product, phones from 2019 on) or `max` (qemu's newest core: adds i8mm, as Armv9 phones).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT_DIR))
from omnidraft.atomic import write_bytes_atomic  # noqa: E402
from omnidraft.errors import OmniDraftError  # noqa: E402
from omnidraft.state import omnidraft_home  # noqa: E402
from omnidraft.progress import stage  # noqa: E402

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PYTHON = "usr/bin/python3.11"
PLATFORMS = ["manylinux2014_aarch64", *(f"manylinux_2_{v}_aarch64" for v in (17, 24, 25, 26, 27, 28, 31, 34, 35))]
PINNED = ["torch==2.13.0", "executorch==1.5.1"]
# What the runtime path imports (omnidraft's bundle runtime, executorch's Python runtime and devtools).
RUNTIME = ["numpy", "transformers==5.24.0", "tokenizers", "sentencepiece", "safetensors", "pyyaml", "psutil",
           "filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec", "packaging", "flatbuffers",
           "ruamel.yaml", "tabulate", "py-cpuinfo", "protobuf"]
CUDA = ["cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3",
        "nvidia-cudnn-cu13==9.20.0.48", "nvidia-cusparselt-cu13==0.8.1", "nvidia-nccl-cu13>=2.29",
        "nvidia-nvshmem-cu13>=3.4.5"]
CPUS = {  # qemu -cpu name -> (MIDR part number in /proc/cpuinfo, Features line)
    "a76": ("cortex-a76", "0xd0b", "fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc "
                                   "dcpop asimddp"),
    "max": ("max", "0xd0b", "fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
                            "asimddp sve i8mm bf16 svei8mm"),
}
STAMP = ".built-v1"


@dataclass(frozen=True)
class Arm64Env:
    home: Path

    @property
    def qemu(self) -> Path:
        return self.home / "tools/usr/bin/qemu-aarch64-static"

    @property
    def root(self) -> Path:
        return self.home / "root"

    def command(self, args: list[str], cpu: str = "a76") -> list[str]:
        """The argv that runs the arm64 Python with `args`."""
        return [str(self.qemu), "-cpu", CPUS[cpu][0], "-L", str(self.root),
                "-E", "PYTHONPATH=" + os.pathsep.join([str(ROOT_DIR), *(str(self.home / d) for d in ("site", "cuda"))]),
                str(self.root / PYTHON), *args]

    def run(self, args: list[str], cpu: str = "a76", **kwargs) -> subprocess.CompletedProcess:
        write_cpuinfo(self.root, cpu)
        return subprocess.run(self.command(args, cpu), **kwargs)


def default_home() -> Path:
    return omnidraft_home() / "arm64"


def open_env(home: Path | None = None) -> Arm64Env:
    """The built environment, or a one-line error saying how to build it."""
    env = Arm64Env(home or default_home())
    if not (env.home / STAMP).exists():
        raise OmniDraftError(f"no arm64 environment in {env.home}: build it with `python tools/arm64/env.py build` "
                             "(or `make test-arm64`)")
    return env


def build(home: Path | None = None) -> Arm64Env:
    """Build the environment (each step skipped when already done); its handle."""
    env = Arm64Env(home or default_home())
    if (env.home / STAMP).exists():
        return env
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise OmniDraftError(f"cannot build the arm64 environment: {tool} is missing (a Debian machine is needed)")
    env.home.mkdir(parents=True, exist_ok=True)
    if not env.qemu.exists():
        with stage("arm64: qemu-user-static and debootstrap from Debian"):
            debs = env.home / "debs"
            debs.mkdir(exist_ok=True)
            _run(["apt-get", "download", "qemu-user-static", "debootstrap"], cwd=debs, what="apt-get download")
            for deb in debs.glob("*.deb"):
                _run(["dpkg-deb", "-x", str(deb), str(env.home / "tools")], what=f"unpacking {deb.name}")
    if not (env.root / PYTHON).exists():
        with stage(f"arm64: Debian {SUITE} arm64 root with Python 3.11 (debootstrap, first stage)"):
            shutil.rmtree(env.root, ignore_errors=True)
            tools = env.home / "tools"
            _run([str(tools / "usr/sbin/debootstrap"), "--foreign", "--arch=arm64", "--variant=minbase",
                  "--include=python3.11,libpython3.11-stdlib,libgomp1,libstdc++6", SUITE, str(env.root), MIRROR],
                 env={**os.environ, "DEBOOTSTRAP_DIR": str(tools / "usr/share/debootstrap")}, what="debootstrap")
        with stage("arm64: unpacking the root's packages"):
            for deb in sorted((env.root / "var/cache/apt/archives").glob("*.deb")):
                _run(["dpkg-deb", "-x", str(deb), str(env.root)], what=f"unpacking {deb.name}")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--python-version", "3.11", "--implementation", "cp",
           "--only-binary=:all:", *(f"--platform={p}" for p in PLATFORMS)]
    for folder, packages, no_deps, what in (("site", PINNED, True, "torch and executorch"),
                                            ("site", RUNTIME, False, "runtime libraries"),
                                            ("cuda", CUDA, False, "CUDA runtime libraries torch's build links")):
        marker = env.home / f".{folder}-{what.split()[0]}"
        if marker.exists():
            continue
        with stage(f"arm64: aarch64 wheels: {what}"):
            _run([*pip, "--target", str(env.home / folder), "--upgrade", *(["--no-deps"] if no_deps else []),
                  *packages], what=f"pip ({what})")
        marker.touch()
    with stage("arm64: checking torch and executorch under emulation"):
        probe = env.run(["-c", "import platform, torch; from executorch.runtime import Runtime; "
                         "from executorch.extension.llm.custom_ops import custom_ops; "
                         "print(platform.machine(), torch.__version__)"], capture_output=True, text=True)
        if probe.returncode != 0 or "aarch64" not in probe.stdout:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            raise OmniDraftError(f"the arm64 environment does not start: {last[:200]}")
    (env.home / STAMP).touch()
    return env


def write_cpuinfo(root: Path, cpu: str) -> None:
    """/proc/cpuinfo and /sys CPU lists of a two-core `cpu` inside the root (read through qemu's -L prefix)."""
    _, part, features = CPUS[cpu]
    text = "".join(f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
                   f"CPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: {part}\nCPU revision\t: 1\n\n" for i in range(2))
    (root / "proc").mkdir(exist_ok=True)
    write_bytes_atomic(root / "proc/cpuinfo", text.encode())
    cpus = root / "sys/devices/system/cpu"
    cpus.mkdir(parents=True, exist_ok=True)
    for name in ("possible", "present", "online"):
        write_bytes_atomic(cpus / name, b"0-1\n")


def _run(argv: list[str], what: str, **kwargs) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        raise OmniDraftError(f"cannot build the arm64 environment: {what} failed: {last[:200]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the environment (skipped when built)")
    run = sub.add_parser("run", help="run the arm64 Python with the arguments after --")
    run.add_argument("--cpu", choices=sorted(CPUS), default="a76")
    run.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            print(build().home)
            return 0
        rest = args.args[1:] if args.args[:1] == ["--"] else args.args
        return open_env().run(rest, cpu=args.cpu).returncode
    except OmniDraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
