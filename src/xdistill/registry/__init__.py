"""MLflow tracking, registration and champion promotion of distilled students.

- :mod:`xdistill.registry.store`      tracking URI resolution, the client, the promotion lock
- :mod:`xdistill.registry.register`   the ``register`` stage: one MLflow run per pipeline run,
  the student logged with the sentence-transformers flavor and registered as a new version
- :mod:`xdistill.registry.promotion`  the promotion gate (``champion`` alias) and rollback

MLflow is imported lazily inside functions: importing this package stays cheap.
"""
