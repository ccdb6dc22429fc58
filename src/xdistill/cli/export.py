"""``xdistill export STUDENT -o OUT``: the student as ONNX fp32, ONNX int8 and fp16 safetensors.

See :func:`xdistill.export.export_student`. Use the result with
``xdistill encode|mine --model OUT --backend onnx|onnx-int8|torch``.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from xdistill.export import FORMATS

    parser.add_argument("student", type=Path, help="student folder (sentence-transformers), e.g. models/student")
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder to write (replaced atomically)")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                        help="what to write (default: all of %(default)s)")


def run(args: argparse.Namespace) -> int:
    from xdistill.export import export_student

    report = export_student(args.student, args.output, args.formats)
    print(json.dumps(report.as_dict(), indent=2))
    return 0


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    """``--backend`` of the commands that encode with a student (encode, mine)."""
    from xdistill.export import BACKENDS

    parser.add_argument("--backend", choices=BACKENDS, default="torch",
                        help="torch (default), or the ONNX fp32 / int8 files of an exported folder (CPU)")
