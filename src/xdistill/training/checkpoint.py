"""Training checkpoints: atomic files that make a resumed run bit-identical to an uninterrupted one.

A checkpoint holds the student's trainable weights (the frozen word-embedding table is rebuilt
from the model spec, which keeps a mE5 checkpoint at ~1/5 of the full model), the objective's
weights (feature-distillation projection), optimiser and scheduler state, every process's RNG
states (python, numpy, torch CPU and CUDA), the data position, the history and the early-stopping
state, and a fingerprint of everything that shapes the trajectory. A checkpoint whose fingerprint
differs from the current run's is ignored and the run starts fresh.

Checkpoints hold tensors, numbers, strings and containers only, and load with ``weights_only=True``: a file
planted in a checkpoint folder cannot run code when a run resumes (the numpy RNG state, an array, is stored
as a tensor).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xdistill.io import atomic_path

logger = logging.getLogger(__name__)

LAST = "last.pt"
BEST = "best.pt"
# A new best is written here first and becomes best.pt only once last.pt (whose loop state names
# the best step) is written too: a kill in between never leaves a best.pt the resumed state disowns.
BEST_PENDING = "best.pending.pt"


def settle_best(directory: Path, best_step: int, pending_step: int | None = None) -> None:
    """Make a pending best checkpoint ``best.pt`` when it is the step the loop state calls best
    (the state was saved after it); otherwise it is an orphan of a killed run and goes.

    ``pending_step``: the step the pending file holds, when the caller wrote it and knows (the training
    loop); None reads it from the file (a resumed run, which cannot know)."""
    pending = directory / BEST_PENDING
    if not pending.is_file():
        return
    if pending_step is None:
        pending_step = torch.load(pending, map_location="cpu", weights_only=True).get("step")
    if pending_step == best_step:
        os.replace(pending, directory / BEST)
    else:
        pending.unlink()


def run_fingerprint(parts: dict[str, Any]) -> str:
    """A short stable hash of JSON-serialisable run settings."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """blake2b of a file's bytes (the training data are a few MB: hashing is cheap)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def capture_rng_state() -> dict[str, Any]:
    """Every RNG state training consumes (dropout draws from torch's generators)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (
            kind,
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(position),
            int(has_gauss),
            float(gauss),
        ),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    kind, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    """Python's RNG state with its tuples back (a checkpoint may hand them back as lists)."""
    return tuple(_as_tuples(item) for item in value) if isinstance(value, list | tuple) else value


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def save_checkpoint(directory: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``directory/name`` atomically (a kill leaves the previous file intact)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    with atomic_path(final) as tmp:
        torch.save(plain_data(payload), tmp)
    return final


def plain_data(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into Python numbers and tensors, so it loads with
    ``weights_only=True`` (metrics computed with numpy are numpy scalars)."""
    if isinstance(value, dict):
        return {key: plain_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_data(item) for item in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return value


def load_checkpoint(directory: Path, name: str, fingerprint: str) -> dict[str, Any] | None:
    """The checkpoint ``directory/name`` when it exists and belongs to this run, else None."""
    path = directory / name
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # an unreadable checkpoint (or one holding more than data) only means "start fresh"
        logger.warning("ignoring unreadable checkpoint %s (%s)", path, str(exc).splitlines()[0])
        return None
    if payload.get("fingerprint") != fingerprint:
        logger.info(
            "checkpoint %s belongs to other settings (%s != %s): starting fresh",
            path,
            payload.get("fingerprint"),
            fingerprint,
        )
        return None
    return payload


def clear_checkpoints(directory: Path) -> None:
    """Remove a previous run's checkpoints (other settings): they can never be resumed."""
    if directory.is_dir():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
