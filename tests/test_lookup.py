"""Lookup proposals: the index, the walk, the scorer, the hybrid policy, exactness, and the history file."""

import json

import numpy as np
import pytest

from omnidraft.lookup_history import HistoryFileError, open_lookup, read_history, save_lookup, write_history
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.hybrid import CallCosts, Hybrid
from omnidraft.runtime.lookup import SEP, Candidates, Doc, HistoryIndex, find_candidates, match_in, walk
from omnidraft.runtime.lookup_proposer import LookupProposer, LookupScorer, expected_accepted
from omnidraft.runtime.stats import ProposerStats

from .helpers import bigram_runner, byte_vocab, chi_square_p, exact_distribution, sample_law

# Lookup always worth proposing, the drafter never: reproducible policy decisions whatever the machine's load.
LOOKUP_PAYS = (1.0, 0.01, 100.0)


def brute_matches(tokens: np.ndarray, suffix: np.ndarray):
    """Every end position of the longest suffix match (>= 2 tokens) with a token after it."""
    best, ends = 0, []
    for e in range(len(tokens) - 1):
        if tokens[e + 1] == SEP:
            continue
        n = 0
        while n < min(32, len(suffix)) and e - n >= 0 and tokens[e - n] == suffix[-1 - n]:
            n += 1
        if n > best:
            best, ends = n, [e]
        elif n == best and n:
            ends.append(e)
    return (best, ends) if best >= 2 else (0, [])


def test_history_index_finds_the_longest_matches_like_brute_force():
    rng = np.random.default_rng(0)
    index = HistoryIndex(max_tokens=10_000)
    docs = [rng.integers(0, 6, size=int(rng.integers(2, 80))) for _ in range(40)]
    for i, d in enumerate(docs):
        if i % 7 == 6:  # a chat's next turn extends the newest document
            index.add(d, extend_last=True)
            docs[i - 1] = np.concatenate([docs[i - 1], d])
            docs[i] = np.zeros(0, dtype=np.int64)
        else:
            index.add(d)
        if i == 20:
            index._build()  # the first part in the bigram index, the rest searched by brute force
    docs = [d for d in docs if len(d)]
    assert [d.tokens.tolist() for d in index.docs] == [d.tolist() for d in docs]
    for _ in range(200):
        suffix = rng.integers(0, 6, size=int(rng.integers(2, 12)))
        tokens, ends, length = index.match(suffix)
        joined = np.concatenate([np.append(d, SEP) for d in docs])
        assert tokens.tolist() == joined.tolist()
        want_len, _ = brute_matches(joined, suffix)
        assert length == want_len
        assert sorted(ends.tolist()) == brute_matches(joined, suffix)[1]


def test_walk_takes_the_most_frequent_continuation_and_stops_at_documents_ends():
    # After "1 2": "3 4" twice, "3 5" once, "9" once; the last occurrence runs into a separator.
    tokens = np.array([1, 2, 3, 4, SEP, 1, 2, 3, 5, SEP, 1, 2, 3, 4, SEP, 1, 2, 9, SEP, 1, 2], dtype=np.int32)
    ends, length = match_in(tokens, np.array([7, 1, 2]))
    assert length == 2 and list(ends) == [1, 6, 11, 16]
    c = walk(tokens, ends, 5, Candidates(match=length, source="context"))
    assert c.tokens == [3, 4] and c.frequency == [0.75, 2 / 3] and c.support == [4, 3]
    assert find_candidates([5, 5, 6, 7, 5, 5], None, 4).tokens == [6, 7, 5, 5]  # the text's own repeat


def test_scorer_learns_which_continuations_the_target_accepts():
    scorer = LookupScorer()
    sure = Candidates([1] * 4, [1.0] * 4, [1] * 4, 10, "history")
    x = scorer.features(sure)
    before = scorer.probs(x).copy()
    for _ in range(50):  # these continuations are always rejected
        scorer.learn(x[:1], np.array([0.0]))
    assert (scorer.probs(x) < before).all()
    assert expected_accepted(np.array([1.0, 0.5, 0.5])).tolist() == [1.0, 1.5, 1.75]


def repeating_prompt(vocab_size: int = 1000):
    rng = np.random.default_rng(5)
    phrase = rng.integers(10, vocab_size, size=12).tolist()
    return [2] + phrase * 3 + phrase[:4]


@pytest.mark.parametrize("costs", [CallCosts(fixed=LOOKUP_PAYS), None])
def test_greedy_output_is_exact_with_lookup_and_hybrid(costs, tiny_target, tiny_drafter, target_vocab, draft_vocab):
    ids = target_vocab.tokenizer.encode("a b c d a b c d a b c d a b")
    want = SpeculativeDecoder(tiny_target, target_vocab).generate(ids, GenerationConfig(40, speculative=False))
    lookup = LookupProposer(HistoryIndex())
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    for proposer in (Hybrid(lookup, None, costs), Hybrid(lookup, drafting, costs)):
        dec = SpeculativeDecoder(tiny_target, target_vocab, proposer)
        for _ in range(2):  # the second run also finds the first one in the history
            got = dec.generate(ids, GenerationConfig(40, draft_len=3))
            assert got.token_ids == want.token_ids and got.text == want.text
    if costs is not None:  # lookup proposed and the target accepted some of it
        assert got.stats.by_source["lookup"].accepted > 0
        assert got.stats.proposers.lookup.history_tokens > 0


def test_hybrid_tries_the_drafter_and_drops_it_when_it_does_not_pay(tiny_target, tiny_drafter, target_vocab,
                                                                     draft_vocab):
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    dec = SpeculativeDecoder(tiny_target, target_vocab, Hybrid(None, drafting, CallCosts(fixed=LOOKUP_PAYS),
                                                               explore_share=0.05))
    got = dec.generate(target_vocab.tokenizer.encode("Once upon a time"), GenerationConfig(40, draft_len=2))
    # a drafter call costs 100 target steps here: even always right it could not pay, so it is never tried
    assert got.stats.proposers.hybrid.choices["drafter"] == 0
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    dec = SpeculativeDecoder(tiny_target, target_vocab, Hybrid(None, drafting, CallCosts(fixed=(1.0, 0.01, 0.1)),
                                                               explore_share=0.05))
    got = dec.generate(target_vocab.tokenizer.encode("Once upon a time"), GenerationConfig(40, draft_len=2))
    choices = got.stats.proposers.hybrid.choices
    # at 0.1 of a target step the prior (0.35 per token) says try it; a random drafter is never right, so after
    # its first round it is only re-checked when 5% of the time since covers a re-check (0.1 per drafter call +
    # 0.01 per verified token + catching up: about 3-4 rounds of the target)
    assert choices["none"] >= 28 and 2 <= choices["drafter"] <= 10


def test_an_idle_drafter_catches_up_on_the_recent_text_only(tiny_target, tiny_drafter, target_vocab, draft_vocab):
    """Catching up after a long idle stretch reads at most CATCHUP_WINDOW draft tokens (what a re-check is priced
    at), and the output stays the target's own greedy output."""
    from omnidraft.runtime.drafting import CATCHUP_WINDOW

    prompt = target_vocab.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 12)
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    drafting.begin(prompt, GenerationConfig(24, draft_len=2), np.random.default_rng(0), read_prompt=False)
    assert len(drafting.draft_seq) > CATCHUP_WINDOW + 32 and drafting.unread() == CATCHUP_WINDOW
    tiny_target.forward(prompt, 0)
    proposal = drafting.propose(prompt, 3)
    assert proposal.calls[0][0] == CATCHUP_WINDOW and len(drafting.draft_seq) == CATCHUP_WINDOW

    config = GenerationConfig(24, draft_len=2)
    alone = SpeculativeDecoder(tiny_target, target_vocab).generate(prompt, config).token_ids
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    hybrid = SpeculativeDecoder(tiny_target, target_vocab, Hybrid(None, drafting, CallCosts(fixed=(1.0, 0.01, 0.1)),
                                                                  explore_share=0.05))
    got = hybrid.generate(prompt, config)
    assert got.token_ids == alone and got.stats.proposers.hybrid.choices["drafter"] >= 1


def test_a_drafter_that_pays_is_used_every_round_and_not_benched_by_a_bad_start():
    """The target's own bigram table as the drafter (always right after its first miss): the hybrid keeps it."""
    v = 6
    rng = np.random.default_rng(3)
    table = rng.normal(0, 2.0, size=(v, v))
    vocab = byte_vocab(v)
    drafting = DraftModel.between(bigram_runner(table), vocab, bigram_runner(table), vocab)
    hybrid = Hybrid(None, drafting, CallCosts(fixed=(1.0, 0.01, 0.1)))
    hybrid.rounds.add(0, 3, 3)  # an unlucky first round, as a prompt's first draft can be
    dec = SpeculativeDecoder(bigram_runner(table), vocab, hybrid)
    got = dec.generate([0], GenerationConfig(40, draft_len=3))
    choices = got.stats.proposers.hybrid.choices
    assert choices["none"] == 0 and choices["drafter"] >= 10
    assert got.stats.by_source["drafter"].accepted == got.stats.by_source["drafter"].proposed


def test_lookup_sampling_reproduces_the_target_distribution():
    """A lookup proposal is a point mass: accept with p(x), else sample p without x. The law is exact."""
    v, n, runs = 4, 3, 4000
    rng = np.random.default_rng(1)
    table = rng.normal(0, 1.5, size=(v, v))
    table[0, 1] = table[1, 0] = 3.0  # the prompt's own pattern is likely, so lookup proposes and is often right
    vocab = byte_vocab(v)
    lookup = LookupProposer(None)
    dec = SpeculativeDecoder(bigram_runner(table), vocab, Hybrid(lookup, None, CallCosts(fixed=LOOKUP_PAYS)))
    prompt = [0, 1, 0, 1, 0]
    counts, totals = sample_law(dec, prompt, n, runs)
    assert chi_square_p(counts, exact_distribution(table, 0, n), runs) > 1e-3
    assert 0.2 < totals["acceptance"] < 0.95  # both the accept and the residual paths were exercised


def test_lookup_sampling_under_top_p_reproduces_the_target_distribution():
    """Lookup's point masses under temperature and top-p: a proposal outside the top-p set is never accepted,
    and the output law is the truncated one exactly (against a full-sort reference of top-p)."""
    v, n, runs = 5, 3, 4000
    rng = np.random.default_rng(4)
    table = rng.normal(0, 1.5, size=(v, v))
    table[0, 1] = table[1, 0] = 2.5
    table[1, 3] = table[3, 1] = 1.8  # a pattern the prompt repeats, not always inside top-p
    vocab = byte_vocab(v)
    dec = SpeculativeDecoder(bigram_runner(table), vocab, Hybrid(LookupProposer(None), None,
                                                                 CallCosts(fixed=LOOKUP_PAYS)))
    counts, totals = sample_law(dec, [0, 1, 3, 1, 0, 1, 3, 1, 0], n, runs, temperature=0.8, top_p=0.7)
    law = exact_distribution(table, 0, n, temperature=0.8, top_p=0.7)
    assert chi_square_p({k: c for k, c in counts.items()}, {k: p for k, p in law.items() if p > 0}, runs) > 1e-3
    assert totals["drafted"] > 0 and 0.1 < totals["acceptance"] < 0.95


class LookupThenDrafter:
    """Every round a chain: lookup's first `m` tokens continued by the drafter (the hybrid's chain option,
    forced, so that every round exercises the drafter's `after` path)."""

    def __init__(self, lookup, drafting, m: int = 1):
        self.lookup, self.drafting, self.m = lookup, drafting, m

    def begin(self, seq, config, rng, learn=True):
        self.lookup.begin(seq, config, rng, learn)
        self.drafting.begin(seq, config, rng, learn)

    def propose(self, seq, budget, after=None):
        look = self.lookup.propose(seq, budget)
        look.truncate(min(self.m, budget - 1))
        return look.then(self.drafting.propose(seq, budget - len(look), after=look if len(look) else None))

    def observe(self, seq, rnd):
        self.lookup.observe(seq, rnd)
        self.drafting.observe(seq, rnd)

    def end(self, weights_changed=False, remember=True):
        return ProposerStats(drafter=self.drafting.end(weights_changed, remember).drafter,
                             lookup=self.lookup.end(weights_changed, remember).lookup)


@pytest.mark.parametrize("m", [1, 3])
def test_chained_rounds_are_exact_across_vocabularies(m, tiny_target, tiny_drafter, target_vocab, draft_vocab):
    ids = target_vocab.tokenizer.encode("a b c d a b c d a b c d a b")
    want = SpeculativeDecoder(tiny_target, target_vocab).generate(ids, GenerationConfig(40, speculative=False))
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    dec = SpeculativeDecoder(tiny_target, target_vocab, LookupThenDrafter(LookupProposer(HistoryIndex()), drafting, m))
    for _ in range(2):
        got = dec.generate(ids, GenerationConfig(40, draft_len=3))
        assert got.token_ids == want.token_ids
    by = got.stats.by_source
    assert by["lookup"].rounds > 0 and by["drafter"].rounds > 0  # both proposed, in the same rounds


@pytest.mark.parametrize("sampled_drafts", [False, True])
def test_chained_sampling_reproduces_the_target_distribution(sampled_drafts):
    """A lookup point mass continued by the drafter's draft (its most likely tokens, or sampled), one vocabulary:
    the output law is exact."""
    v, n, runs = 4, 3, 4000
    rng = np.random.default_rng(2)
    table = rng.normal(0, 1.5, size=(v, v))
    table[0, 1] = table[1, 0] = 3.0  # the prompt's pattern is likely: lookup is often right
    draft_table = table + rng.normal(0, 1.0, size=(v, v))
    vocab = byte_vocab(v)
    drafting = DraftModel.between(bigram_runner(table), vocab, bigram_runner(draft_table), vocab)
    dec = SpeculativeDecoder(bigram_runner(table), vocab, LookupThenDrafter(LookupProposer(None), drafting))
    counts, totals = sample_law(dec, [0, 1, 0, 1, 0], n, runs, draft_len=2, sampled_drafts=sampled_drafts)
    assert chi_square_p(counts, exact_distribution(table, 0, n), runs) > 1e-3
    assert 0.2 < totals["acceptance"] < 0.95


def test_the_hybrid_chains_lookup_and_the_drafter_when_that_pays(tiny_target, tiny_drafter, target_vocab,
                                                                 draft_vocab):
    """Verification nearly free and the drafter cheap: a short, unsure lookup prefix is worth continuing."""
    ids = target_vocab.tokenizer.encode("a b c d a b c d a b c d a b")
    want = SpeculativeDecoder(tiny_target, target_vocab).generate(ids, GenerationConfig(30, speculative=False))
    drafting = DraftModel.between(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    hybrid = Hybrid(LookupProposer(HistoryIndex()), drafting, CallCosts(fixed=(1.0, 0.001, 0.01)))
    got = SpeculativeDecoder(tiny_target, target_vocab, hybrid).generate(ids, GenerationConfig(30, draft_len=2))
    assert got.token_ids == want.token_ids
    assert got.stats.proposers.hybrid.choices["chain"] > 0


def docs_of(*lists):
    return [Doc(np.array(t, dtype=np.int32), i + 1, float(i)) for i, t in enumerate(lists)]


def test_history_file_round_trip_merge_and_bad_files(tmp_path):
    path, messages = tmp_path / "h.npz", []
    a = open_lookup(path, "fp", 100, 1000, messages.append)
    a.history.add([1, 2, 3, 4])
    save_lookup(path, a, "fp", 100, messages.append)
    b = open_lookup(path, "fp", 100, 1000, messages.append)  # a second process, started after the first saved
    a.history.add([5, 6, 7])
    b.history.add([8, 9])
    save_lookup(path, a, "fp", 100, messages.append)
    save_lookup(path, b, "fp", 100, messages.append)  # merges with a's save instead of overwriting it
    docs, _ = read_history(path, "fp", 100)
    assert sorted(d.tokens.tolist() for d in docs) == [[1, 2, 3, 4], [5, 6, 7], [8, 9]] and not messages
    # a chat that grows keeps one document, its longest version
    chat = LookupProposer(b.history)
    chat.begin([1, 1])
    chat._seq = [1, 1, 2]
    chat.end()
    chat._seq = [1, 1, 2, 3, 3]
    chat.end()
    assert [d.tokens.tolist() for d in b.history.docs][-1] == [1, 1, 2, 3, 3]
    # over-long: the oldest documents go, with a warning
    small = open_lookup(path, "fp", 100, 4, messages.append)
    assert len(small.history) <= 4 and "more than the limit" in messages.pop()
    # damaged, foreign or out-of-range files are set aside with a warning, never fatal
    good = path.read_bytes()
    bad_files = {
        "garbage": b"\x00not a zip",
        "foreign": None,
        "range": None,
    }
    for name, content in bad_files.items():
        if name == "foreign":
            write_history(path, docs_of([1, 2]), LookupScorer(), "another-tokenizer")
        elif name == "range":
            write_history(path, docs_of([1, 1_000_000_000], [-7, 3]), LookupScorer(), "fp")
        else:
            path.write_bytes(content)
        with pytest.raises(HistoryFileError):
            read_history(path, "fp", 100)
        fresh = open_lookup(path, "fp", 100, 1000, messages.append)
        assert len(fresh.history) == 0 and not path.exists()
        assert messages.pop().startswith("[omnidraft] warning: lookup history h.npz is")
        path.write_bytes(good)
    assert len(list(tmp_path.glob("h.npz.bad-*"))) == 3  # three set-asides, none overwritten


def test_reset_sets_the_history_aside(tmp_path):
    path, messages = tmp_path / "h.npz", []
    write_history(path, docs_of([1, 2, 3]), LookupScorer(), "fp")
    fresh = open_lookup(path, "fp", 100, 1000, messages.append, reset=True)
    assert len(fresh.history) == 0 and "adaptation reset" in messages[0]
    assert len(list(tmp_path.glob("h.npz.reset-*"))) == 1


def test_generate_uses_lookup_by_default_and_keeps_the_history(tmp_path, tiny_checkpoints):
    import json

    from omnidraft.cli import main

    prompt = "one two three four one two three four one two three four one two"
    args = ["generate", "--prompt", prompt, "--max-new-tokens", "12", "--json", "--threads", "1",
            "--target", str(tiny_checkpoints["target"]), "--drafter", str(tiny_checkpoints["drafter"])]
    reports = {}
    for mode in ([], ["--proposer", "lookup"], ["--proposer", "drafter"], ["--no-speculation"]):
        import contextlib
        import io
        import os

        out = io.StringIO()
        os.environ["OMNIDRAFT_HOME"] = str(tmp_path)
        try:
            with contextlib.redirect_stdout(out):
                assert main(args + mode) == 0
        finally:
            del os.environ["OMNIDRAFT_HOME"]
        reports[" ".join(mode) or "default"] = json.loads(out.getvalue())
    texts = {r["text"] for r in reports.values()}
    assert len(texts) == 1  # greedy: identical whoever proposes
    assert reports["default"]["proposer"] == "hybrid" and "lookup" in reports["--proposer lookup"]["proposals"]
    assert reports["--proposer lookup"]["drafter"] is None  # no drafter loaded
    assert "lookup" not in reports["--proposer drafter"]["proposals"]
    (history,) = (tmp_path / "history").glob("*--default.npz")
    docs, _ = read_history(history, history.name.split("--")[1], 10**6)
    assert len(docs) == 2  # the two runs that used lookup (the drafter-only and target-only runs keep none)


def test_an_unwritable_history_folder_warns_and_loses_nothing_else(tmp_path, tiny_checkpoints, capsys, monkeypatch):
    from omnidraft.pair import build_eager_pair

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    pair = build_eager_pair(str(tiny_checkpoints["target"]), str(tiny_checkpoints["drafter"]), proposer="hybrid",
                            profile="p")
    ids = pair.encode_prompt("one two one two one")
    pair.decoder.generate(ids, GenerationConfig(8, draft_len=2))
    (tmp_path / "blocker").write_text("a file where a folder should be")
    pair.history_path = tmp_path / "blocker" / "history.npz"
    pair.save_cache()  # the n-gram cache is saved, the history cannot be: one warning, no exception
    err = capsys.readouterr().err
    assert "[omnidraft] warning: could not save the lookup history" in err
    assert list((tmp_path / "ngram").glob("*.json"))


def test_the_hybrid_keeps_its_measured_costs_between_runs(tmp_path, tiny_checkpoints):
    from .helpers import run_cli

    args = ("generate", "--prompt", "one two one two one", "--max-new-tokens", "12", "--json", "--threads", "1",
            "--draft-len", "3", "--target", tiny_checkpoints["target"], "--drafter", tiny_checkpoints["drafter"])
    assert run_cli(*args, home=tmp_path).returncode == 0
    (costs,) = (tmp_path / "costs").glob("*.json")
    saved = json.loads(costs.read_text())
    assert saved["costs"]["sums"][0] > 0 and len(saved["drafter_rounds"]) == 5  # the target was measured
    absurd = dict(saved, costs=dict(saved["costs"], sums=[1.0, 1.0, 1e-6, 1.0, 1e-6]))  # a 0.001 ms target step
    for bad in ('{"format": "omnidraft-hybrid-costs-2", "costs": {"sums": [1, 2]}}', json.dumps(absurd)):
        costs.write_text(bad)
        again = run_cli(*args, home=tmp_path)
        assert again.returncode == 0 and "[omnidraft] warning: costs file" in again.stderr, again.stderr
        remeasured = json.loads(costs.read_text())  # set aside, measured afresh and saved
        assert remeasured["format"] == "omnidraft-hybrid-costs-2" and remeasured["costs"]["sums"][2] > 1e-5
    assert len(list((tmp_path / "costs").glob("*.bad-*"))) == 2
