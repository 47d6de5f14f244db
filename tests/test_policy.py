"""bundle.json's policy section: the runtime's constants as the app reads them, checked on load."""

import copy
import json
import math
from pathlib import Path

import pytest

from omnidraft.bundle import POLICY_FIELDS, Manifest, ManifestError, ModelEntry, check_policy, read_manifest
from omnidraft.export.policy import policy
from omnidraft.runtime import lookup
from omnidraft.runtime.drafting import CATCHUP_WINDOW
from omnidraft.runtime.hybrid import EXPLORE_SHARE, DrafterRounds


def test_the_section_carries_the_runtime_modules_own_values_and_passes_its_check():
    p = policy()
    check_policy(p)
    assert {s: set(v) for s, v in p.items()} == {s: set(v) for s, v in POLICY_FIELDS.items()}
    assert p["hybrid"]["explore_share"] == EXPLORE_SHARE and p["drafting"]["catchup_window"] == CATCHUP_WINDOW
    assert p["hybrid"]["rounds_prior"] == DrafterRounds().values() and p["lookup"]["max_match"] == lookup.MAX_MATCH
    assert json.loads(json.dumps(p)) == p  # plain JSON


@pytest.mark.parametrize("section, name, value", [
    ("hybrid", "explore_share", 1.5), ("hybrid", "ridge", 0.0), ("hybrid", "carry", math.inf),
    ("hybrid", "rounds_prior", [1.0] * 4), ("drafting", "catchup_window", 0), ("drafting", "max_lookup", 2.5),
    ("lookup", "scorer_prior", [0.0, "x", 0, 0, 0, 0]), ("adaptation", "lr", "0.001"), ("adaptation", "every", True),
])
def test_a_value_out_of_its_kind_names_its_field(section, name, value):
    p = copy.deepcopy(policy())
    p[section][name] = value
    with pytest.raises(ValueError, match=f"^policy.{section}.{name}$"):
        check_policy(p)
    p = copy.deepcopy(policy())
    del p[section]
    with pytest.raises(ValueError, match=f"^policy.{section}$"):
        check_policy(p)


def _manifest() -> dict:
    """A bundle.json of two tiny models (no files on disk: read_manifest checks fields only)."""
    models = {role: ModelEntry(f"tiny-{role}", 100, 64, 5, [1, 1, 1, 64, 16], f"tokenizers/{role}", "f" * 16,
                               {"executorch": f"{role}.pte"}) for role in ("target", "drafter")}
    files = {f"{role}.pte": {"size": 1, "sha256": "0" * 64} for role in ("target", "drafter")}
    return Manifest(64, 4, "none", "pair", models, files).to_dict()


def test_a_manifest_names_the_damaged_policy_field():
    m = _manifest()
    assert read_manifest(m, Path("bundle.json")).policy is None  # bundles exported before the section load
    m["policy"] = policy()
    assert read_manifest(m, Path("bundle.json")).policy == policy()
    m["policy"]["lookup"]["max_occurrences"] = -1
    with pytest.raises(ManifestError) as e:
        read_manifest(m, Path("bundle.json"))
    assert e.value.field == "policy.lookup.max_occurrences"
