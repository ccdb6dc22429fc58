"""The ``start_adapter`` stage: the teacher-space adapter fitted on the student as training started.

The evaluate stage scores the trained student's adapter beside the same adapter on the untrained
start (base + head fitted to the teacher), which shows what the adapter does without the
distillation. Fitting it means embedding both sides of ``train.teacher_adapter.pairs`` training
pairs with the start (about 14 minutes for 32000 pairs at the quality run's scale on 2 cores).
The start depends only on the untrained student, the head fit and the data, not on the recipe's loss, steps or
learning rate, so as its own stage DVC's run cache serves it to every recipe that starts from the
same student instead of fitting it again in each ``train`` run.

The fit is :func:`xdistill.adapter.fit.fit_and_save_adapter`, the trainer's own, on
the same inputs the trainer would give it: the training pairs spread to ``train.train_max_pairs``
and tokenised to ``train.max_seq_length``, the dev pairs spread to ``train.dev_max_pairs`` at the
model's own length, batches of ``train.eval_batch_size``. Those keys, ``train.teacher_adapter``
and ``models.teacher`` are everything the result depends on (the stage's DVC params).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from xdistill.adapter.fit import AdapterSettings, fit_and_save_adapter
from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic
from xdistill.training.batches import read_parallel_pairs
from xdistill.training.settings import TrainParams
from xdistill.training.tokenized import Featurizer, tokenize_pairs

logger = logging.getLogger(__name__)

# written instead of an adapter when train.teacher_adapter.pairs is 0 (a DVC output must exist)
DISABLED_FILE = "disabled.json"


def fit_start_adapter(
    start_dir: str | Path,
    train_file: str | Path,
    dev_file: str | Path,
    teacher_dir: str | Path,
    params: TrainParams,
    out_dir: str | Path,
    *,
    teacher_spec: str | None = None,
    teacher_precision: str = "fp32",
    device: str | None = None,
    threads: int | None = None,
) -> dict[str, Any] | None:
    """Fit the teacher-space adapter of the student in ``start_dir`` (a sentence-transformers folder) and
    write it to ``out_dir/teacher_space/`` (the folder replaced atomically); the fit's report, or None when
    ``params.teacher_adapter`` fits none (``out_dir`` then holds only :data:`DISABLED_FILE`). The report
    records the start's content digest, so the adapter cannot be loaded with another student.

    ``train_file``/``dev_file`` are the parallel stage's pairs, ``teacher_dir`` the teacher store whose
    vectors of ``teacher_spec`` (encoded in ``teacher_precision``, teacher_embed.precision) are the targets;
    ``threads`` caps torch's CPU threads (``runtime.threads``, as the trainer does). Raises
    :class:`XdistillError` when the start is missing.
    """
    from xdistill.models import default_prompt, load_sentence_transformer
    from xdistill.models.fingerprint import folder_digest
    from xdistill.teacher.store import TeacherStore

    if threads:
        torch.set_num_threads(threads)
    settings = AdapterSettings.from_params(params.teacher_adapter)
    start_dir = Path(start_dir)
    with atomic_path(out_dir, is_dir=True) as tmp:
        if not settings.enabled:
            write_json_atomic(tmp / DISABLED_FILE, {"reason": "train.teacher_adapter.pairs is 0"})
            return None
        if not (start_dir / "modules.json").is_file():
            raise XdistillError(f"{start_dir}: not a student folder (no modules.json; run the `train` stage first)")
        target = torch.device(device or params.device)  # train.device: the fit runs where the training ran
        student = load_sentence_transformer(str(start_dir), device=str(target))
        store = TeacherStore.open(teacher_dir, teacher_spec=teacher_spec, precision=teacher_precision)
        store.verify()
        prompt = default_prompt(student)
        train = tokenize_pairs(
            read_parallel_pairs(train_file).spread(params.train_max_pairs),
            student,
            prompt,
            params.max_seq_length,
            store,
        )
        # dev data as the trainer validates it: whole inputs up to the model's own limit
        dev = tokenize_pairs(
            read_parallel_pairs(dev_file).spread(params.dev_max_pairs),
            student,
            prompt,
            student.max_seq_length or params.max_seq_length,
            store,
        )
        logger.info(
            "fitting the teacher-space adapter of %s on %d of %d training pairs",
            start_dir,
            min(settings.pairs, len(train)),
            len(train),
        )
        report = fit_and_save_adapter(
            student,
            Featurizer(student, target),
            train,
            dev,
            settings,
            teacher_spec or store.teacher_spec,
            params.eval_batch_size,
            tmp,
            student_digest=folder_digest(start_dir),
        )
    logger.info(
        "teacher-space adapter of %s fitted on %d pairs into %s: dev teacher-space accuracy %.2f",
        start_dir,
        report["pairs"],
        out_dir,
        report["dev_teacher_accuracy"],
    )
    return report
