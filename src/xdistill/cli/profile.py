"""``xdistill profile``: apply a machine profile (``profiles/<name>.yaml``) to params.yaml in place.

xdistill profile                       # list the profiles
xdistill profile gpu                   # one datacenter GPU, bf16 (Ampere or newer)
xdistill profile gpu-fp16 --params other/params.yaml
xdistill profile my-machine.yaml       # a profile file of your own
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("profile", required=False)
@click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("params.yaml"),
    show_default=True,
    help="the params file to change (comments and layout are kept)",
)
def command(profile: str | None, params_file: Path) -> int:
    """Deep-merge PROFILE (a name from profiles/, or a .yaml file) into params.yaml; no PROFILE: list them.

    A profile changes only settings params.yaml has; it never adds one. `git diff params.yaml`
    shows what changed, `git checkout params.yaml` takes it back.
    """
    from xdistill.errors import XdistillError
    from xdistill.profiles import apply_profile, list_profiles, profiles_dir

    if profile is None:
        names = list_profiles(params_file.parent)
        if not names:
            raise XdistillError(f"no profiles in {profiles_dir(params_file.parent)}")
        click.echo("\n".join(names))
        return 0
    if not params_file.is_file():
        raise XdistillError(f"{params_file}: params file not found (run from the project root or pass --params)")
    values = apply_profile(params_file, profile)
    for key, value in values.items():
        click.echo(f"{key}: {json.dumps(value)}")
    click.echo(f"{params_file}: profile {profile} applied ({len(values)} settings)")
    return 0
