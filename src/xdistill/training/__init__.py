"""Distillation training: cached teacher embeddings, losses and the training loop.

Modules (import them directly; this package imports nothing heavy so ``import xdistill.training``
stays cheap and torch-free):

- :mod:`xdistill.training.teacher_store` the on-disk fp16 teacher-embedding store
  (:class:`~xdistill.training.teacher_store.TeacherStore`, its writer and lock)
- :mod:`xdistill.training.teacher_embed` the teacher's inference into the store (``embed_into_store``,
  ``build_teacher_store``: the ``teacher_embed`` stage)
- :mod:`xdistill.training.losses` the distillation losses (MSE, LEALLA feature and logit
  distillation, additive margin softmax) and ``DistillationObjective`` combining them
"""
