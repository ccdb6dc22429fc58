"""Teacher embeddings on disk: the store's format, its durable writer and the ``teacher_embed`` stage.

Modules (import them directly; this package imports nothing, so ``import xdistill.teacher`` stays
cheap and torch-free):

- :mod:`xdistill.teacher.store` the store's format and reading side
  (:class:`~xdistill.teacher.store.TeacherStore`: open, lookup, verify)
- :mod:`xdistill.teacher.store_writer` writing a sub-store durably under its lock (atomic shards,
  checksums, the canonical rewrite)
- :mod:`xdistill.teacher.embed` the teacher's inference into the store (``embed_into_store``,
  ``build_teacher_store``: the ``teacher_embed`` stage)
"""
