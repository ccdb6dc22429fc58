"""Distillation training: losses and the training loop, on the teacher's cached embeddings.

Modules (import them directly; this package imports nothing heavy so ``import xdistill.training``
stays cheap and torch-free):

- :mod:`xdistill.training.losses` the distillation losses (MSE, LEALLA feature and logit
  distillation, additive margin softmax) and ``DistillationObjective`` combining them

Elsewhere: the teacher-embedding store and the ``teacher_embed`` stage that fills it are
:mod:`xdistill.teacher`; the teacher-space adapter fitted on the trained student (and the
``start_adapter`` stage) is :mod:`xdistill.adapter`.
"""
