"""The shipped small drafter: `--drafter small`, assembled by `prepare` from committed tensors.

A trained drafter should not cost a newcomer an hour of training. The repository
holds only what training changed with respect to SmolLM2-135M-Instruct (the
default drafter, installed as a pip package): the kept layers and the final norm,
in fp16 safetensors, with their sha256, the exact command that trained them and
the draft head. `assemble` rebuilds the drafter from SmolLM2 and those tensors
into $OMNIDRAFT_HOME/models/omnidraft-small (atomically, once; a damaged or
mismatched delta file is one clear error).

    python -m omnidraft.small_drafter write --trained DIR --command "..."   # maintainers: refresh the delta
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from .atomic import atomic_directory
from .errors import OmniDraftError
from .bundle import sha256_file
from .models import DEFAULT_DRAFTER, default_model_dir, models_root, prepare_default_model
from .state import omnidraft_home
from .progress import log, stage

NAME = "small"
SHIPPED = Path(__file__).resolve().parent / "data" / "small-drafter"
DELTA, MANIFEST, HEAD = "delta.safetensors", "drafter.json", "omnidraft-draft-head.json"
FORMAT = "omnidraft-drafter-delta"


def model_dir() -> Path:
    return models_root() / "omnidraft-small"


sha256 = sha256_file  # the delta's checksum, as drafter.json records it


def read_manifest(shipped: Path = SHIPPED) -> dict:
    try:
        manifest = json.loads((shipped / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise OmniDraftError(f"the small drafter's {shipped / MANIFEST} is missing or damaged: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != 1:
        raise OmniDraftError(f"{shipped / MANIFEST} is not a version-1 {FORMAT} file")
    return manifest


def assemble(shipped: Path | None = None, out: Path | None = None) -> Path:
    """The small drafter's checkpoint folder, built from SmolLM2 and the shipped delta (default SHIPPED) once."""
    shipped, out = shipped or SHIPPED, out or model_dir()
    manifest = read_manifest(shipped)
    stamp = out / "omnidraft-source.json"
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()).get("sha256") == manifest["sha256"]:
                return out
        except ValueError:
            pass  # damaged stamp: assemble again (the folder is replaced atomically)
    import torch
    from safetensors.torch import load_file

    from .student import make_student
    from .models import load_model, load_tokenizer

    delta_path = shipped / DELTA
    if not delta_path.exists() or sha256(delta_path) != manifest["sha256"]:
        raise OmniDraftError(f"{delta_path} is missing or does not match its sha256 in {MANIFEST} "
                             "(a partial clone or a Git LFS pointer?)")
    base = prepare_default_model(DEFAULT_DRAFTER)
    log(f"[omnidraft] assembling the small drafter into {out} (one time)")
    with stage("small drafter: SmolLM2 layers + shipped tensors"):
        student, layers = make_student(load_model(base), len(manifest["layers_kept"]))
        if layers != manifest["layers_kept"]:
            raise OmniDraftError(f"{MANIFEST} keeps layers {manifest['layers_kept']}, not {layers}")
        delta = load_file(str(delta_path))
        state = student.state_dict()
        unknown = sorted(set(delta) - set(state))
        if unknown:
            raise OmniDraftError(f"{DELTA} holds tensors this drafter does not have: {unknown[:3]}")
        for name, tensor in delta.items():
            if tensor.shape != state[name].shape:
                raise OmniDraftError(f"{DELTA}: {name} has shape {tuple(tensor.shape)}, expected "
                                     f"{tuple(state[name].shape)}")
            state[name] = tensor.to(torch.float32)
        student.load_state_dict(state)
        student.tie_weights()
        student.eval()
        with atomic_directory(out) as tmp:
            student.save_pretrained(tmp)
            load_tokenizer(base).save_pretrained(tmp)
            shutil.copy(shipped / HEAD, tmp / HEAD)
            (tmp / "omnidraft-source.json").write_text(json.dumps(
                {"name": NAME, "base": DEFAULT_DRAFTER.name, "sha256": manifest["sha256"]}, indent=1))
    return out


def write_delta(trained: Path, command: str, shipped: Path = SHIPPED, measured: dict | None = None) -> dict:
    """Store what `trained` changed with respect to SmolLM2 (fp16), its sha256 and how it was made."""
    import torch
    from safetensors.torch import save_file

    from .student import make_student
    from .models import load_model

    info = json.loads((trained / "omnidraft-drafter.json").read_text())
    base = load_model(default_model_dir(DEFAULT_DRAFTER))
    start, layers = make_student(base, len(info["layers_kept"]))
    before, after = start.state_dict(), load_model(trained).state_dict()
    changed = {n: t.to(torch.float16).contiguous() for n, t in after.items()
               if n in before and not torch.equal(t, before[n]) and "embed_tokens" not in n and "lm_head" not in n}
    shipped.mkdir(parents=True, exist_ok=True)
    save_file(changed, str(shipped / DELTA))
    shutil.copy(trained / HEAD, shipped / HEAD)
    manifest = {"format": FORMAT, "version": 1, "base": DEFAULT_DRAFTER.name, "layers_kept": layers,
                "tensors": len(changed), "parameters": sum(t.numel() for t in changed.values()),
                "sha256": sha256(shipped / DELTA), "command": command,
                "teacher": info["teacher"], "training": info["config"], "teacher_config": info.get("teacher_config"),
                "final_loss": info.get("final_loss"), "measured": measured or {}}
    (shipped / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m omnidraft.small_drafter")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="store a trained drafter's changed tensors as the shipped small drafter")
    w.add_argument("--trained", type=Path, required=True)
    w.add_argument("--command", required=True, help="the exact command that trained it")
    w.add_argument("--measured", type=Path, help="a benchmark's results.json to record beside it")
    args = ap.parse_args(argv)
    measured = json.loads(args.measured.read_text()) if args.measured else None
    manifest = write_delta(args.trained, args.command, measured=measured)
    size = (SHIPPED / DELTA).stat().st_size
    print(f"{SHIPPED / DELTA}: {manifest['tensors']} tensors, {manifest['parameters']:,} parameters, "
          f"{size / 1e6:.1f} MB, sha256 {manifest['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
