"""MLflow tracking, registration and champion promotion of distilled students.

- :mod:`xdistill.registry.store`      tracking URI resolution, the client, the promotion lock
- :mod:`xdistill.registry.register`   the ``register`` stage: one MLflow run per pipeline run,
  the student logged with the sentence-transformers flavor and registered as a new version
- :mod:`xdistill.registry.gate`       the promotion gate: whether a candidate's scores earn the ``champion`` alias
- :mod:`xdistill.registry.promotion`  champion bookkeeping: promotion through the gate, alias history, rollback

MLflow is imported lazily inside functions: importing this package stays cheap.
"""
