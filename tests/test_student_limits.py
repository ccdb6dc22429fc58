"""What the untrained student cannot do is refused when it loads, before any data is tokenised."""

from __future__ import annotations

import pytest

from tests.lightweight_helpers import E5_SPEC
from xdistill.errors import XdistillError
from xdistill.training.student import StudentConfig, build_student


def test_a_max_seq_length_beyond_the_students_positions_is_refused() -> None:
    """mE5-small reads 512 tokens: 100000 would end in an index error inside a forward pass."""
    with pytest.raises(XdistillError, match=r"params train.max_seq_length is 100000, but the student .* at most 512"):
        build_student(StudentConfig(E5_SPEC, keep_layers=1, max_seq_length=100000))


def test_the_longest_length_the_student_reads_is_accepted() -> None:
    assert build_student(StudentConfig(E5_SPEC, keep_layers=1, max_seq_length=512)) is not None
