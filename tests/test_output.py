"""Secret masking rules."""

from __future__ import annotations

import pytest

from glmlaunch.output import MASK, is_secret_name, mask_obj, mask_secrets, register_secrets


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["VLLM_DCP_A2A_MAX_TOKENS", "turnkey", "KEYBOARD", "MONKEY_PATCH", "PATH"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_mask_obj_masks_env_like_secret_keys_only() -> None:
    doc = {
        "key": "x",
        "kv_bytes_per_token_origin": "estimate",
        "env": {"HF_TOKEN": "hf_abc", "VLLM_DCP_A2A_MAX_TOKENS": "64"},
    }
    assert mask_obj(doc) == {
        "key": "x",
        "kv_bytes_per_token_origin": "estimate",
        "env": {"HF_TOKEN": MASK, "VLLM_DCP_A2A_MAX_TOKENS": "64"},
    }


def test_mask_secrets_in_text() -> None:
    register_secrets({"HF_TOKEN": "hf_registered_value"})
    text = "export HF_TOKEN=hf_inline_value; curl -H 'x: hf_registered_value' turnkey:cudagraph"
    masked = mask_secrets(text)
    assert "hf_inline_value" not in masked and "hf_registered_value" not in masked
    assert "turnkey:cudagraph" in masked
