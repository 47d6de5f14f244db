"""The CLI against bad input: one line on stderr, a non-zero exit, never a traceback."""

import json
import os
import subprocess
import sys

import pytest

from .helpers import HANG_GUARD_SECONDS, run_cli


def run(*args, home=None):
    return run_cli(*args, home=home)


def assert_one_line_error(proc, needle, code=None):
    assert proc.returncode != 0
    if code is not None:
        assert proc.returncode == code
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["generate", "--prompt", ""], "prompt is empty"),
        (["generate", "--prompt", "   \n"], "prompt is empty"),
        (["generate", "--prompt-file", "/no/such/file.txt"], "prompt file not found"),
        (["generate", "--prompt", "x", "--draft-len", "0"], "--draft-len: must be at least 1"),
        (["generate", "--prompt", "x", "--draft-len", "often"], "--draft-len: expected a number, 'auto' or"),
        (["generate", "--prompt", "x", "--draft-len", "auto", "--gamma", "1"], "--gamma: must be in (0, 1)"),
        (["generate", "--prompt", "x", "--max-draft-len", "0"], "--max-draft-len: must be at least 1"),
        (["adapt", "--stream", "s.txt", "--predictor-updates", "never"], "--predictor-updates: invalid choice"),
        (["adapt", "--stream", "s.txt", "--top-p", "0"], "--top-p: must be in (0, 1]"),
        (["adapt", "--stream", "s.txt", "--temperature", "-1"], "--temperature"),
        (["simulate", "--bundle", "b", "--draft-len", "-2"], "--draft-len: must be at least 1"),
        (["generate", "--prompt", "x", "--max-new-tokens", "-3"], "--max-new-tokens: must be at least 1"),
        (["generate", "--prompt", "x", "--top-p", "1.5"], "--top-p: must be in (0, 1]"),
        (["generate", "--prompt", "x", "--top-p", "nan"], "--top-p: must be in (0, 1], got nan"),
        (["generate", "--prompt", "x", "--temperature", "nan"], "--temperature"),
        (["generate", "--prompt", "x", "--target", "/no/such/model"], "model path does not exist"),
        (["generate"], "one of the arguments --prompt --prompt-file is required"),
        (["generate", "--prompt", "abc\udcff"], "the prompt is not valid UTF-8 text: character 3 is a lone surrogate"),
        (["generate", "--prompt", "x", "--private", "--reset-adaptation"], "--private changes nothing in the profile"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_fast(args, needle):
    assert_one_line_error(run(*args), needle)


def test_a_prompt_argument_that_is_not_utf8_is_one_line_from_the_real_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "omnidraft", "generate", "--prompt", b"abc\xff"],
                          capture_output=True, text=True, timeout=HANG_GUARD_SECONDS,
                          env={**os.environ, "OMNIDRAFT_HOME": str(tmp_path / "home")})
    assert_one_line_error(proc, "(the byte 0xff)", code=1)


def test_a_context_beyond_the_model_is_refused_with_the_cache_size(tmp_path, tiny_checkpoints):
    ran = run("generate", "--prompt", "x", "--target", str(tiny_checkpoints["target"]), "--drafter",
              str(tiny_checkpoints["drafter"]), "--max-context", "10000000", home=tmp_path / "home")
    assert_one_line_error(ran, "--max-context 10,000,000 is beyond target's own limit of 32,768 positions")
    assert "bytes)" in ran.stderr


def test_invalid_utf8_prompt_file(tmp_path):
    bad = tmp_path / "p.txt"
    bad.write_bytes(b"hello \xff\xfe world")
    assert_one_line_error(run("generate", "--prompt-file", str(bad)), "not valid UTF-8 (byte 6)")


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "holds no prompts"),
        (b"\n  \n", "holds no prompts"),
        (b"def f():\n\xff\n", "is not valid UTF-8 (byte 9)"),
        (b'{"prompt": "ok"}\n{"prompt": \n', ":2: not valid JSON"),
        (b'{"text": "no prompt key"}\n', ':1: expected {"prompt": "..."}'),
    ],
)
def test_adapt_bad_stream(tmp_path, content, needle):
    stream = tmp_path / "stream.jsonl"
    stream.write_bytes(content)
    assert_one_line_error(run("adapt", "--stream", str(stream)), needle, code=1)


def test_adapt_bad_options(tmp_path):
    assert_one_line_error(run("adapt", "--stream", str(tmp_path / "none.txt")), "prompt stream not found", code=1)
    stream = tmp_path / "s.txt"
    stream.write_text("hello\n")
    assert_one_line_error(run("adapt", "--stream", str(stream), "--window", "0"), "--window: must be at least 1")
    assert_one_line_error(run("adapt", "--stream", str(stream), "--backend", "executorch"), "needs --bundle DIR")
    assert_one_line_error(run("adapt", "--stream", str(stream), "--profile", "../evil", home=tmp_path),
                          "profile name")


def test_folder_without_config(tmp_path):
    assert_one_line_error(run("generate", "--prompt", "x", "--drafter", str(tmp_path)), "no config.json")


def test_prompt_longer_than_context_and_json_output(tmp_path, tiny_checkpoints):
    target_path, drafter_path = tiny_checkpoints["target"], tiny_checkpoints["drafter"]
    long = run("generate", "--prompt", "word " * 50, "--max-context", "16",
               "--target", str(target_path), "--drafter", str(drafter_path))
    assert_one_line_error(long, "the context window is 16")
    ok = run("generate", "--prompt", "The capital of France is", "--max-new-tokens", "8", "--json",
             "--target", str(target_path), "--drafter", str(drafter_path), home=tmp_path)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    for key in ("text", "new_tokens", "target_calls", "tokens_per_target_call", "drafted", "accepted",
                "acceptance_rate", "ngram_cache_hits", "wall_s", "tokens_per_s", "target", "drafter",
                "backend", "cross_vocab", "speculative"):
        assert key in report
    assert report["new_tokens"] == 8 and report["cross_vocab"] is True and report["backend"] == "eager"
    assert list((tmp_path / "ngram").glob("*.json")), "the n-gram cache was saved"


def test_corrupt_cache_is_set_aside(tmp_path, tiny_checkpoints):
    target_path, drafter_path = tiny_checkpoints["target"], tiny_checkpoints["drafter"]
    args = ("generate", "--prompt", "Hello there", "--max-new-tokens", "4", "--json",
            "--target", str(target_path), "--drafter", str(drafter_path))
    assert run(*args, home=tmp_path).returncode == 0
    (cache_file,) = (tmp_path / "ngram").glob("*.json")
    cache_file.write_bytes(b"\x00garbage")
    proc = run(*args, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[omnidraft] warning: n-gram cache" in proc.stderr and "starting a fresh cache" in proc.stderr
    assert list((tmp_path / "ngram").glob("*.bad-*"))
    json.loads(cache_file.read_text())  # a fresh, valid cache was written back


def test_adapt_stream(tmp_path, tiny_checkpoints):
    """`omnidraft adapt` end to end on tiny checkpoints: updates happen, the adapter is saved, a
    second run resumes it (real-drafter LoRA steps are tested in tests/test_adaptation.py)."""
    target_path, drafter_path = tiny_checkpoints["target"], tiny_checkpoints["drafter"]
    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(json.dumps({"prompt": p}) for p in (
        "def mean(xs):\n    return", "import json\n\ndef load(path):\n", "for i in range(10):\n    print(")))
    held = tmp_path / "eval.jsonl"
    held.write_text("\n".join(json.dumps({"prompt": p}) for p in ("def add(a, b):\n", "class Point:\n")))
    args = ("adapt", "--stream", str(stream), "--window", "2", "--max-new-tokens", "10", "--adapt-every", "1",
            "--profile", "ci", "--json", "--target", str(target_path), "--drafter", str(drafter_path),
            "--eval", str(held))
    proc = run(*args, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for key in ("eval_before", "eval_after"):  # per held-out prompt counts, for paired comparisons
        ev = report[key]
        accepted, drafted, new_tokens, _calls = (sum(col) for col in zip(*ev["per_prompt"]))
        assert len(ev["per_prompt"]) == 2 and new_tokens == ev["new_tokens"]
        assert ev["acceptance_rate"] == pytest.approx(accepted / drafted if drafted else 0.0)
    assert [w["prompts"] for w in report["windows"]] == [2, 1]
    assert report["windows"][-1]["updates"] == 2  # so far; the first generation is held out for the guard
    assert report["adaptation"]["updates"] == 2 and report["adaptation"]["learner"] == "eager"
    assert report["adaptation"]["seconds_per_step"] > 0 and report["adaptation"]["extra_bytes"]["trainable"] > 0
    assert all(0 <= w["acceptance_rate"] <= 1 and w["tokens_per_target_call"] >= 1 for w in report["windows"])
    (adapter,) = (tmp_path / "adapters").glob("*--ci.pt")
    assert adapter == tmp_path / "adapters" / adapter.name and report["adapter"] == str(adapter)
    again = run(*args[:4], "1", *args[5:], home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resumed adapter" in again.stderr and "(2 updates so far)" in again.stderr, again.stderr


def test_adapt_stream_samples_strictly(tmp_path, tiny_checkpoints):
    """`omnidraft adapt` under sampling: it adapts, strict mode proposes no n-gram merges, and a seed repeats a run
    (with a fixed proposer: the hybrid's choices follow measured timings, so under sampling its draws may differ)."""
    stream = tmp_path / "stream.txt"
    stream.write_text("The cat sat on\nOnce upon a time\nHello, my name is\nThe weather today\n")
    args = ("adapt", "--stream", str(stream), "--window", "2", "--max-new-tokens", "10", "--adapt-every", "1",
            "--temperature", "0.9", "--top-p", "0.95", "--strict-sampling", "--seed", "5", "--json",
            "--proposer", "drafter",
            "--target", str(tiny_checkpoints["target"]), "--drafter", str(tiny_checkpoints["drafter"]))
    reports = []
    for home in ("a", "b"):
        proc = run(*args, home=tmp_path / home)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
    first, second = reports
    assert first["temperature"] == 0.9 and first["strict_sampling"] is True
    assert first["adaptation"]["updates"] == 3  # the first prompt is held out for the guard
    assert all(w["ngram_cache_hits"] == 0 for w in first["windows"])
    assert sum(w["new_tokens"] for w in first["windows"]) > 0
    same = ("acceptance_rate", "new_tokens", "tokens_per_target_call")
    assert [[w[k] for k in same] for w in first["windows"]] == [[w[k] for k in same] for w in second["windows"]]


def test_the_installed_entry_point(tmp_path, tiny_checkpoints):
    """One real `python -m omnidraft` process: a bad input and a good run (the other CLI tests run in-process)."""
    env = {**os.environ, "OMNIDRAFT_HOME": str(tmp_path)}
    bad = subprocess.run([sys.executable, "-m", "omnidraft", "generate", "--prompt", ""], capture_output=True,
                         text=True, env=env, timeout=HANG_GUARD_SECONDS)
    assert_one_line_error(bad, "prompt is empty", code=1)
    ok = subprocess.run([sys.executable, "-m", "omnidraft", "generate", "--prompt", "Hello", "--max-new-tokens", "4",
                         "--target", str(tiny_checkpoints["target"]), "--drafter", str(tiny_checkpoints["drafter"])],
                        capture_output=True, text=True, env=env, timeout=HANG_GUARD_SECONDS)
    assert ok.returncode == 0 and "[speculative] 4 tokens" in ok.stderr, ok.stderr


def test_models_folder_a_dangling_link_is_one_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    assert_one_line_error(run("generate", "--prompt", "x", home=home), "which does not exist")
    (home / "models").unlink()
    (home / "models").write_text("not a folder")
    assert_one_line_error(run("generate", "--prompt", "x", home=home), "is not a folder")


def test_a_home_that_is_a_file_or_leads_nowhere_is_one_line(tmp_path):
    home = tmp_path / "home"
    home.write_text("a file")
    for args in (["generate", "--prompt", "x"], ["prepare"], ["export", "--out", tmp_path / "b"]):
        assert_one_line_error(run(*args, home=home), "OMNIDRAFT_HOME")
    home.unlink()
    home.symlink_to(tmp_path / "nowhere", target_is_directory=True)
    assert_one_line_error(run("generate", "--prompt", "x", home=home), "is not a folder")


def _state_tree(root):
    """Every file under root with its size, modification time and content hash."""
    import hashlib

    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_show_sources_in_the_json_report_and_plain_text_off_a_terminal(tmp_path, tiny_checkpoints):
    pair = ("--target", tiny_checkpoints["target"], "--drafter", tiny_checkpoints["drafter"], "--max-new-tokens", "16")
    ran = run("generate", "--prompt", "a b c a b c a b", "--show-sources", "--json", *pair, home=tmp_path)
    report = json.loads(ran.stdout)
    assert len(report["sources"]) == report["new_tokens"] and set(report["sources"]) <= {"lookup", "drafter", "target"}
    ran = run("generate", "--prompt", "a b c a b c a b", "--show-sources", *pair, home=tmp_path)
    assert ran.returncode == 0 and "\033[" not in ran.stdout and "colours a terminal" in ran.stderr


def test_private_writes_nothing_derived_from_the_prompt(tmp_path, tiny_checkpoints):
    pair = ("--target", tiny_checkpoints["target"], "--drafter", tiny_checkpoints["drafter"], "--max-new-tokens", "12")
    home = tmp_path / "home"
    assert run("generate", "--prompt", "def add(a, b):", *pair, home=home).returncode == 0
    before = _state_tree(home)
    assert any(k.startswith("history/") for k in before) and any(k.startswith("ngram/") for k in before)
    assert any(k.startswith("costs/") for k in before)
    for proposer in ("hybrid", "drafter", "lookup"):
        ran = run("generate", "--prompt", "my card number is 4929 1234", "--private", "--proposer", proposer,
                  "--draft-len", "auto", *pair, home=home)
        assert ran.returncode == 0, ran.stderr
        assert _state_tree(home) == before, proposer
    fresh = tmp_path / "fresh"
    assert run("generate", "--prompt", "my card number is 4929 1234", "--private", *pair, home=fresh).returncode == 0
    assert _state_tree(fresh) == {} if fresh.exists() else True
    assert_one_line_error(run("generate", "--prompt", "x", "--private", "--adapt", *pair, home=home), "choose one")


def test_an_8da8w_export_gets_the_fastest_drafter_measured_unless_told_otherwise():
    from omnidraft.export.build import ExportOptions

    assert ExportOptions(quant="8da8w").quants == {"target": "8da8w", "drafter": "8da4w"}
    assert ExportOptions(quant="8da8w", drafter_quant="8da8w").quants["drafter"] == "8da8w"
    for quant in ("none", "8da4w", "int8"):
        assert ExportOptions(quant=quant).quants == {"target": quant, "drafter": quant}


def test_a_long_stage_says_it_is_still_running(capsys):
    import time

    from omnidraft.progress import stage

    with stage("lowering", heartbeat_s=0.05):
        time.sleep(0.3)
    with pytest.raises(ValueError), stage("failing", heartbeat_s=10):
        raise ValueError("x")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[omnidraft] lowering ..." and err[-2].startswith("[omnidraft] lowering done (")
    assert any(line.startswith("[omnidraft] lowering: still running (") for line in err[1:-2])
    assert err[-1] == "[omnidraft] failing ..."  # a failed stage prints nothing more: the error follows


def test_a_context_whose_cache_would_crowd_memory_is_warned(monkeypatch, tiny_checkpoints, capsys):
    from omnidraft import models

    monkeypatch.setattr(models, "RAM_SHARE", 1e-9)
    models.check_context(tiny_checkpoints["target"], 4096)
    err = capsys.readouterr().err
    assert "warning: --max-context 4,096 gives target a KV cache of" in err and "bytes)" in err
