"""Profiles are validated strictly and say where each value came from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine import ProfileError, default_profile, load_profile


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "profile.toml"
    p.write_text(body, "utf-8")
    return p


def test_default_profile_serves_embedded_gemma_with_full_swa() -> None:
    p = load_profile(None)
    assert p.model == "embedded:gemma3-270m"
    assert p.swa_full is True
    assert p.prompt_format == "auto"  # the model has no chat template: base framing
    assert set(p.sources.values()) == {"default"}


def test_file_values_override_defaults_and_record_source(tmp_path: Path) -> None:
    path = write(tmp_path, "[context]\nn_ctx = 4096\n[sampler]\ntemperature = 0.7\n")
    p = load_profile(path)
    assert p.n_ctx == 4096
    assert p.get("sampler.temperature") == 0.7
    assert p.sources["context.n_ctx"] == str(path)
    assert p.sources["context.n_batch"] == "default"
    assert p.profile_id != default_profile().profile_id


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[context]\nn_ctxx = 4096\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg and "context.n_ctxx" in msg
    assert err.value.data["key"] == "context.n_ctxx"


def test_unknown_section_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"unknown section '\[gpu\]'"):
        load_profile(write(tmp_path, "[gpu]\nx = 1\n"))


@pytest.mark.parametrize(
    ("body", "key", "allowed"),
    [
        ('[prompt]\nformat = "alpaca"\n', "prompt.format",
         "auto | raw | base | chatml | gemma | llama3"),
        ('[context]\ntype_k = "q3"\n', "context.type_k", "f16"),
        ("[context]\nn_ctx = -5\n", "context.n_ctx", ">= 64"),
        ('[context]\nswa_full = "yes"\n', "context.swa_full", "true | false"),
        ("[sampler]\ntop_p = 1.5\n", "sampler.top_p", "0..1"),
        ("[sampler]\nrepeat_penalty = 0\n", "sampler.repeat_penalty", "> 0"),
        ("[context]\nn_batch = 64\nn_ubatch = 128\n", "context.n_ubatch", "n_batch"),
    ],
)
def test_bad_values_name_key_and_allowed_values(
    tmp_path: Path, body: str, key: str, allowed: str
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.data["key"] == key
    assert allowed in str(err.value)
    assert str(path) in str(err.value)


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(write(tmp_path, "[context\n"))
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "absent.toml")


def test_overrides_are_validated() -> None:
    with pytest.raises(ProfileError):
        default_profile().with_overrides({"context.flash_attn": "maybe"})
    p = default_profile().with_overrides({"context.n_ctx": 1024}, source="test")
    assert p.n_ctx == 1024 and p.sources["context.n_ctx"] == "test"


def test_profile_show_cli_json(tmp_path: Path) -> None:
    path = write(tmp_path, "[context]\nn_ctx = 2048\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "contenox_lsp.cli",
            "profile",
            "show",
            "--json",
            "--profile",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["values"]["context.n_ctx"] == 2048
    assert data["sources"]["context.n_ctx"] == str(path)
    assert data["sources"]["context.swa_full"] == "default"


def test_profile_show_cli_rejects_bad_profile(tmp_path: Path) -> None:
    path = write(tmp_path, "[context]\nbogus = 1\n")
    out = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", "profile", "show", "--profile", str(path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "invalid_profile" in out.stderr and "context.bogus" in out.stderr
    assert out.stdout == ""


def test_remote_section_keys_the_remote_backend_only() -> None:
    base = load_profile(None)
    moved = base.with_overrides({"remote.url": "http://gpu-box:8080"}, source="test")
    assert moved.profile_id == base.profile_id  # [remote] means nothing to the llama backend
    remote = base.with_overrides({"profile.backend": "llama-server"}, source="test")
    elsewhere = remote.with_overrides({"remote.url": "http://gpu-box:8080"}, source="test")
    assert elsewhere.profile_id != remote.profile_id  # another server holds other KV
    quicker = remote.with_overrides({"remote.timeout_s": 5.0}, source="test")
    assert quicker.profile_id == remote.profile_id  # timeouts shape requests, not KV
    with pytest.raises(ProfileError, match=r"remote\.url"):
        base.with_overrides({"remote.url": "gpu-box:8080"}, source="test")
