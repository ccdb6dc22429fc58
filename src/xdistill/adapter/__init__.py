"""The teacher-space adapter: a student's second output, its embeddings mapped into the teacher's space.

Modules (import them directly; this package imports nothing, so ``import xdistill.adapter`` stays
cheap and torch-free):

- :mod:`xdistill.adapter.model` the adapter module, its file format (``teacher_space/`` in the
  student folder) and loading an encoder with it (``load_encoder_with_adapter``)
- :mod:`xdistill.adapter.fit` fitting it on a finished student (``AdapterSettings``,
  ``fit_and_save_adapter``)
- :mod:`xdistill.adapter.start` the ``start_adapter`` stage: the adapter fitted on the student as
  training started
"""
