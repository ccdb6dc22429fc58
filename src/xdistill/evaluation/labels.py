"""The names under which each evaluated model's scores are stored (``summary.json``'s ``models``).

The project's words for the models around a run, used alike in code, metrics, reports and the UIs:

- **teacher**: the English model whose space the student learns;
- **untrained student**: the pretrained multilingual encoder the student is built from, as it comes
  (a model card's "base model"), scored as a reference;
- **start**: the student as training starts, the untrained student with its head fitted to the
  teacher; WiSE-FT interpolates between it and the trained weights;
- **student**: the trained student that the run exports.
"""

from __future__ import annotations

TEACHER_LABEL = "teacher"
UNTRAINED_LABEL = "student-untrained"
START_LABEL = "student-start"
MUSE_LABEL = "muse"
STUDENT_LABEL = "student"
# column order of every table: the evaluated student first, then the references
LABEL_ORDER = (STUDENT_LABEL, TEACHER_LABEL, UNTRAINED_LABEL, START_LABEL, MUSE_LABEL)
