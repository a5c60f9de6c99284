"""Detection rules of scrub/check (stages/scrub/rules.py, identities.py, scrubber.py): by value, by pattern, by name, personal data.

Positive cases use FAKE secrets shaped like real ones; negative cases are the false-positive shapes
scrub must leave alone (git SHAs, UUID-like kernel suffixes, `hf_xxxx` placeholders, C++ template
arguments, the fixture's real kernel names and NVTX phase names).
"""
from __future__ import annotations

import sqlite3
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.scrub.identities import IdentityCollector, Pseudonyms
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED, name_words, parse_env_block
from verlprof.stages.scrub.scrubber import Scrubber

FIXTURES = fixtures_dir()
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"

POLICY = load_policy(use_local_environment=False)

# FAKE tokens, one per provider rule (none is valid anywhere).
TOKENS = {
    "hf": "hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o",
    "openai": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "anthropic": "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
    "github": "ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "aws_key_id": "AKIAZ7Q3XK4M9P2L8N5R",
    "slack": "xoxb-123456789012-abcdefGHIJKL",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "google_api_key": "AIzaSyD3x9Q7pL2mK8vN4bR6tY1uW5eI0oA7sF3",
    "gitlab": "glpat-Xy7Zq2Wv9Ut4Rs6Po3Nm",
}


def scrubber(ids=None) -> Scrubber:
    return Scrubber(POLICY, Pseudonyms.build([ids] if ids else [], "test-salt", POLICY))


@pytest.mark.parametrize("rule", sorted(TOKENS))
def test_provider_token_shapes_are_redacted_anywhere(rule: str) -> None:
    sc = scrubber()
    tok = TOKENS[rule]
    out = sc.scrub_rules(f"step 3 printed {tok} to the log", "loc")
    assert tok not in out and REDACTED in out
    assert sc.findings(f"x {tok} y") == (f"pattern:{rule}",)
    assert ("pattern:" + rule, "loc") in sc.counts


def test_context_patterns_need_their_context() -> None:
    sc = scrubber()
    sha = "5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80"
    assert sc.scrub_rules(f"git commit {sha}", "l") == f"git commit {sha}"          # a git SHA alone stays
    assert sha not in sc.scrub_rules(f"wandb login {sha}", "l")                       # next to wandb: a key
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
    assert aws not in sc.scrub_rules(f"aws_secret_access_key = {aws}", "l")
    assert sc.scrub_rules("https://bob:hunter22@example.com/x", "l") == f"https://{REDACTED}@example.com/x"
    assert "abcdefghijklmnop123" not in sc.scrub_rules("Authorization: Bearer abcdefghijklmnop123", "l")
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----"
    assert sc.scrub_rules(f"a\n{key}\nb", "l") == f"a\n{REDACTED}\nb"


@pytest.mark.parametrize("text,secret", [
    ("MY_DB_PASSWORD=s3cr3t-Pa55!", "s3cr3t-Pa55!"),
    ("update_actor api_key=NvtxRangeSecret77", "NvtxRangeSecret77"),
    ('{"authToken": "abc123xyz"}', "abc123xyz"),
    ("--token hf_CmdLine", "hf_CmdLine"),
    ("--password=hunter2", "hunter2"),
    ("session_cookie: 77aa88bb", "77aa88bb"),
    ("PRIVATE_KEY_PEM='x9y8z7'", "x9y8z7"),
])
def test_secret_named_values_are_redacted(text: str, secret: str) -> None:
    out = scrubber().scrub_rules(text, "l")
    assert secret not in out and REDACTED in out


def test_phase_names_survive_redaction_next_to_them() -> None:
    sc = scrubber()
    assert sc.scrub_rules("update_actor api_key=NvtxRangeSecret77", "l") == f"update_actor api_key={REDACTED}"
    for phase in ("step", "gen", "generate_sequences", "update_actor", "old_log_prob", "ref", "adv", "reward"):
        assert sc.scrub_rules(phase, "l") == phase


@pytest.mark.parametrize("text", [
    "hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",                   # placeholder
    "HF_TOKEN=<your token>", "HF_TOKEN=$HF_TOKEN", "API_KEY=***", "token=",
    "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT",
    "kernel_f31e45c5-e457-86cb-1f99-47df0918ba09",             # UUID-like kernel suffix
    "commit 5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
    "void cub::DeviceRadixSortKernel<KeyT=float, ValueT=int>",  # C++ template arguments
    "at::native::KeyValuePair::operator()",
    "TOKENIZERS_PARALLELISM=false", "TIKTOKEN_CACHE_DIR=/opt/tiktoken_cache",
    "torch/nn/functional.py(2455): embedding", "/root/out/raw/x.sqlite", "/tmp/home/user-1/x",
])
def test_false_positive_shapes_are_left_alone(text: str) -> None:
    sc = scrubber()
    assert sc.scrub_rules(text, "l") == text
    assert sc.findings(text) == ()


def test_fixture_kernel_and_phase_strings_unchanged() -> None:
    """Every kernel name and NVTX string of the real 2025 export passes scrub unchanged."""
    conn = sqlite3.connect(f"file:{WHOLE}?mode=ro&immutable=1", uri=True)
    ids = conn.execute(
        "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "UNION SELECT mangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT textId FROM NVTX_EVENTS "
        "UNION SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    strings = [r[0] for r in conn.execute(
        f"SELECT value FROM StringIds WHERE id IN ({','.join(str(i[0]) for i in ids if i[0] is not None)})")]
    conn.close()
    assert len(strings) > 150
    sc = scrubber(IdentityCollector(POLICY).ids)
    changed = [s for s in strings if sc.scrub_rules(s, "l") != s]
    assert changed == []


def test_env_blocks_in_every_separator_style() -> None:
    nul = "A=1\x00HF_TOKEN=hf_abc\x00LS_COLORS=rs=0:di=01;34\x00B=2"
    semi = "A=1;HF_TOKEN=hf_abc;LS_COLORS=rs=0:di=01;34:ln=01;B=2;"
    quoted = 'HF_TOKEN="hf_abc"'
    assert dict(parse_env_block(nul))["LS_COLORS"] == "rs=0:di=01;34"
    assert dict(parse_env_block(semi))["LS_COLORS"] == "rs=0:di=01;34:ln=01"
    assert dict(parse_env_block(semi))["HF_TOKEN"] == "hf_abc"
    assert dict(parse_env_block(quoted))["HF_TOKEN"] == "hf_abc"
    assert dict(parse_env_block("X=1\nMY_SECRET=v v\n"))["MY_SECRET"] == "v v"


def test_identities_and_pseudonyms_are_consistent() -> None:
    a, b = IdentityCollector(POLICY), IdentityCollector(POLICY)
    a.feed("HOSTNAME=gpu-node-07\x00USER=alice\x00HF_TOKEN=hf_AppEnvTok3n0123456789abcdefghijklm")
    b.feed("cwd /home/bob/proj on gpu-node-07.cluster.local")
    b.feed("x", key="Hostname")
    b.feed("gpu-node-03", key="host_name")
    ps1 = Pseudonyms.build([a.ids, b.ids], "s", POLICY)
    ps2 = Pseudonyms.build([b.ids, a.ids], "s", POLICY)   # order of workers does not matter
    assert ps1 == ps2
    hosts = dict(ps1.hosts)
    assert hosts["gpu-node-03"] == "host-1" and hosts["gpu-node-07"] == "host-2"
    assert dict(ps1.users) == {"alice": "user-1", "bob": "user-2"}
    sc = Scrubber(POLICY, ps1)
    out = sc.scrub_rules("alice@gpu-node-07: /home/bob/x hf_AppEnvTok3n0123456789abcdefghijklm", "l")
    assert out == f"user-1@host-2: /home/user-2/x {REDACTED}"


def test_short_host_names_only_in_context() -> None:
    col = IdentityCollector(POLICY)
    col.add_host("vm")
    sc = Scrubber(POLICY, Pseudonyms.build([col.ids], "s", POLICY))
    assert sc.scrub_rules("cudaMalloc vmem vm kernel", "l") == "cudaMalloc vmem vm kernel"
    assert sc.scrub_rules("root@vm:/x HOSTNAME=vm", "l") == "root@host-1:/x HOSTNAME=host-1"


def test_gpu_uuids_are_hashed_stably() -> None:
    sc = scrubber()
    u = "GPU-f31e45c5-e457-86cb-1f99-47df0918ba08"
    out = sc.scrub_rules(f"NVIDIA_VISIBLE_DEVICES={u}", "l")
    assert "f31e45c5" not in out and out == sc.scrub_rules(f"NVIDIA_VISIBLE_DEVICES={u}", "l")
    assert sc.gpu("f31e45c5-e457-86cb-1f99-47df0918ba08", "l").startswith("gpu-")
    assert sc.keyed_findings("uuid", "f31e45c5-e457-86cb-1f99-47df0918ba08") == ("gpu_uuid",)


def test_name_words() -> None:
    assert name_words("hfApiToken") == ["hf", "api", "token"]
    assert name_words("AWS_SECRET_ACCESS_KEY") == ["aws", "secret", "access", "key"]
    assert name_words("--db-password") == ["db", "password"]


def test_policy_file_overrides_and_extends(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('[names]\nwords_add = ["ssn"]\n[values]\nmin_length = 4\n[patterns.custom]\ncorp = "corp_[a-z0-9]{12}"\n')
    pol = load_policy(p, use_local_environment=False)
    assert "ssn" in pol.name_words and "token" in pol.name_words and pol.min_value_length == 4
    sc = Scrubber(pol)
    assert sc.scrub_rules("CUSTOMER_SSN=123-45", "l") == f"CUSTOMER_SSN={REDACTED}"
    assert sc.scrub_rules("id corp_abcdef123456 end", "l") == f"id {REDACTED} end"
    y = tmp_path / "p.yaml"
    y.write_text("personal:\n  keep_users: [alice]\n")
    assert load_policy(y).keep_users == ("alice",)


@pytest.mark.parametrize("content,msg", [
    ("[names]\nwordz = []\n", "unknown policy key"),
    ("[patterns.custom]\nbad = '('\n", "not a valid regex"),
    ("not = [toml", "not valid TOML"),
])
def test_bad_policy_is_one_line_error(tmp_path: Path, content: str, msg: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(content)
    with pytest.raises(BadInputError) as ei:
        load_policy(p)
    assert msg in str(ei.value) and "bad.toml" in str(ei.value) and "\n" not in str(ei.value)


# ---- property tests: random secrets spliced into random strings and JSON keys ----------------

_filler = st.text(alphabet=string.ascii_letters + string.digits + " _-./:,;()[]{}\"'\x00\n", max_size=40)
_secret = st.text(alphabet=string.ascii_letters + string.digits, min_size=10, max_size=30).filter(
    lambda s: len(set(s)) >= 6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pre=_filler, post=_filler, secret=_secret, rule=st.sampled_from(sorted(TOKENS)))
def test_random_tokens_spliced_into_strings_are_found(pre: str, post: str, secret: str, rule: str) -> None:
    sc = scrubber()
    tok = TOKENS[rule]
    text = f"{pre} {tok} {post}"
    assert sc.findings(text), text
    out = sc.scrub_rules(text, "l")
    assert tok not in out
    assert sc.findings(out) == ()          # scrub output is clean for check
    assert sc.scrub_rules(out, "l") == out        # and idempotent


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pre=_filler, post=_filler, secret=_secret)
def test_random_known_values_are_found_anywhere(pre: str, post: str, secret: str) -> None:
    col = IdentityCollector(POLICY)
    col.feed(f"MY_APP_TOKEN={secret}")
    sc = Scrubber(POLICY, Pseudonyms.build([col.ids], "s", POLICY))
    text = pre + secret + post
    assert sc.findings(text)
    assert secret not in sc.scrub_rules(text, "l")


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["api_key", "hfToken", "DB_PASSWORD", "client_secret", "auth", "sessionCookie"]),
       prefix=st.text(alphabet=string.ascii_lowercase, max_size=5), value=_secret)
def test_random_secret_json_keys_are_found(key: str, prefix: str, value: str) -> None:
    from verlprof.stages.scrub.trace import TraceScrubber

    sc = scrubber()
    k = (prefix + "_" + key) if prefix else key
    obj = {"ph": "X", "cat": "cpu_op", "name": "op", "args": {k: value, "nested": {k: [value]}}}
    assert sc.keyed_findings(k, value) == ("secret_by_name",)
    clean = TraceScrubber(sc, POLICY).event(obj)
    assert value not in repr(clean)
    assert clean["name"] == "op"        # a cpu_op's name: torch's (issue 39: by its field)


@pytest.mark.parametrize("value", ["MY00000123", "MyS3cr3tPass", "the0ne-Secret9"])
def test_values_starting_like_placeholders_are_still_secrets(value: str) -> None:
    """Regression (found by hypothesis): the `your_/my_/the_` placeholder rule once swallowed any
    value starting with "my", so a known secret such as MyS3cr3tPass was left in place."""
    col = IdentityCollector(POLICY)
    col.feed(f"MY_APP_TOKEN={value}")
    sc = Scrubber(POLICY, Pseudonyms.build([col.ids], "s", POLICY))
    assert sc.findings(f"x {value} y")
    assert value not in sc.scrub_rules(f"x {value} y", "l")
    assert sc.keyed_findings("api_key", value) == ("secret_by_name",)
