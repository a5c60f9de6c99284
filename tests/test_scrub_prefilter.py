"""The scrub prefilter is a superset of the rules (issue 25): every string the rules would change, it
sends to them.

Judged against the rules themselves, run without the prefilter (`_full`), so the property holds for
the rule set as it is, not for a list kept beside it: every must-catch example of every rule
(secrets.PATTERN_EXAMPLES, personal.EXAMPLES), every string the scrub tests are parametrized with or
hold at module level, the false-positive corpus, and Hypothesis strings built from pieces of all of
those around planted known values, host and user names.
"""
from __future__ import annotations

import importlib
import string
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from scrub_corpus import corpus  # noqa: E402
from verlprof.stages.scrub.personal import EXAMPLES as PERSONAL_EXAMPLES  # noqa: E402
from verlprof.stages.scrub.identities import IdentityCollector, Pseudonyms
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import PATTERN_EXAMPLES
from verlprof.stages.scrub.scrubber import Scrubber

POLICY = load_policy(use_local_environment=False)
# A bundle's identities: known secret values (plain and encoded forms), hosts, users, a GPU UUID.
_IDS = IdentityCollector(POLICY)
for _line in ("JUDGE_API_KEY=Zq8Rr2Lm0Vv7Tt4Pp", "HOSTNAME=gpu-node-17", "USER=jdoe-lab", "HOME=/home/alice9",
              "MY_SECRET=short-s3cr3t", "GPU-7f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"):
    _IDS.feed(_line)
KNOWN = Pseudonyms.build([_IDS.ids], "prefilter-salt", POLICY)
_TEST_MODULES = ("test_scrub_secrets", "test_scrub_encoded", "test_scrub_share", "test_scrub_sqlite",
                 "test_scrub_trace", "test_scrub_trace_fast", "test_scrub_nsys", "test_scrub_snapshot",
                 "test_scrub_cli", "test_collect_publish_scrub")


def _scrubbers(known: Pseudonyms = KNOWN) -> tuple[Scrubber, Scrubber]:
    """(with the prefilter, the rules alone)."""
    full = Scrubber(POLICY, known)
    full._pre.always = True
    return Scrubber(POLICY, known), full


def _changed(full: Scrubber, text: str) -> bool:
    out, kinds = full._apply(text)
    return out != text or bool(kinds)


def _strings(obj: Any, depth: int = 0) -> Iterator[str]:
    if depth > 6:
        return
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k, depth + 1)
            yield from _strings(v, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from _strings(v, depth + 1)


def _test_strings() -> set[str]:
    """Every string the scrub tests hold: parametrize values and module-level constants."""
    out: set[str] = set()
    for name in _TEST_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module needing what this machine lacks adds nothing
            continue
        for key, val in vars(mod).items():
            if key.startswith("__"):
                continue
            out.update(_strings(val))
            for mark in getattr(val, "pytestmark", ()):
                if mark.name == "parametrize" and len(mark.args) > 1:
                    out.update(_strings(list(mark.args[1])))
    return {s for s in out if s}


def _rule_examples() -> list[str]:
    catch = [ex for tps, _fps in PATTERN_EXAMPLES.values() for ex in tps]
    catch += [ex for tps, _fps in PERSONAL_EXAMPLES.values() for ex in tps]
    return catch


def test_every_must_catch_example_of_every_rule_is_flagged() -> None:
    pre, full = _scrubbers()
    examples = _rule_examples()
    assert len(examples) > 40
    for ex in examples:
        assert _changed(full, ex), ex          # a must-catch example: the rules change it
        assert pre.needs_rules(ex), ex
    assert pre.needs_rules_many(examples) == [True] * len(examples)


def test_every_string_of_the_scrub_tests_the_rules_change_is_flagged() -> None:
    pre, full = _scrubbers()
    texts = sorted(_test_strings())
    assert len(texts) > 200
    changed = [t for t in texts if _changed(full, t)]
    assert len(changed) > 50
    missed = [t for t in changed if not pre.needs_rules(t)]
    assert not missed, missed[:5]
    # and the scrub result is the same with and without the prefilter
    assert [pre.scrub_rules(t, "x") for t in texts] == [full.scrub_rules(t, "x") for t in texts]


def test_clean_real_names_mostly_skip_the_rules() -> None:
    """The point of the prefilter: the false-positive corpus (every real kernel and range name) is
    clean, and nearly all of it is passed without the rules."""
    pre, _full = _scrubbers(Pseudonyms(salt="corpus"))
    names = sorted(set().union(*corpus().values()))
    flags = pre.needs_rules_many(names)
    print(f"{len(names)} names, {sum(flags)} sent to the rules")
    assert sum(flags) < 0.01 * len(names)


def _pieces() -> list[str]:
    base = _rule_examples() + sorted(_test_strings())
    base += [v for v in KNOWN.secret_values] + [h for h, _p in KNOWN.hosts] + [u for u, _p in KNOWN.users]
    base += list(KNOWN.gpu_uuids)
    return sorted(set(base))


_PIECES = _pieces()
_ALPHABET = string.ascii_letters + string.digits + " _-./:=@%\"'\\,;()<>[]{}\t\n#+~&|"


@st.composite
def _texts(draw: Any) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            piece = draw(st.sampled_from(_PIECES))
            a = draw(st.integers(0, len(piece)))
            b = draw(st.integers(a, len(piece)))
            parts.append(piece[a:b] if draw(st.booleans()) else piece)
        else:
            parts.append(draw(st.text(alphabet=_ALPHABET, max_size=24)))
    text = "".join(parts)
    return text.upper() if draw(st.integers(0, 9)) == 0 else text


_PRE, _FULL = _scrubbers()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts())
@example(text="token: abc123def456")
@example(text="aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
@example(text="mail jane.doe@corp.xyz")                       # an e-mail whose TLD is no host TLD
@example(text="to=jane%40corp.xyz")                           # ... seen only once URL-decoded
@example(text="/a/dist-packages/b")                           # the cosmetic env-prefix rule
@example(text="GPU-12345678-aaaa-bbbb-cccc-1234567890ab")     # a GPU UUID no identity pass saw
@example(text="_ZN3fooE-kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o")   # a random run only partly in an allowed shape
def test_the_prefilter_never_passes_a_string_the_rules_change(text: str) -> None:
    if _changed(_FULL, text):
        assert _PRE.needs_rules(text), text


@pytest.mark.parametrize("text", ["at::native::vectorized_elementwise_kernel<4, float>", "update_actor",
                                  "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                                  "cudaLaunchKernel_v7000", "gen"])
def test_plain_names_are_not_sent_to_the_rules(text: str) -> None:
    pre, _full = _scrubbers()
    assert not pre.needs_rules(text)
