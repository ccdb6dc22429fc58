"""Profiles (profiles/*.yaml) deep-merged into params.yaml: values set, comments kept, unknown settings refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from xdistill.cli.main import main
from xdistill.errors import XdistillError
from xdistill.params_file import check_stage_params
from xdistill.profiles import apply_profile, list_profiles, load_profile

REPO_ROOT = Path(__file__).resolve().parent.parent

# The settings a profile may set: the ones that move work to a GPU host (docs/gpu.md)
CONTRACT_KEYS = {
    "train.device",
    "train.precision",
    "train.batch_size",
    "train.eval_batch_size",
    "teacher_embed.batch_size",
    "teacher_embed.device",
    "teacher_embed.precision",
    "evaluate.batch_size",
    "evaluate.precision",
    "runtime.nproc",
    "runtime.loader_workers",
    "runtime.pin_memory",
}

# params.yaml-like: the sections a GPU profile touches, with comments and a flow-style list
PARAMS = """\
# a params file
languages: [de, es]   # targets

train:
  device: cpu                 # cpu or cuda
  precision: fp32
  batch_size: 32              # pairs per step
  eval_batch_size: 128
  steps: 120
  loss:
    mse: 1.0
teacher_embed:
  batch_size: 128
  device: null
  precision: fp32
evaluate:
  batch_size: 64
  precision: fp32
runtime:
  nproc: 1                    # training processes per host
  loader_workers: 0
  pin_memory: false
  log_every: 10
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A folder holding PARAMS as params.yaml and the project's profiles."""
    (tmp_path / "params.yaml").write_text(PARAMS, encoding="utf-8")
    shutil.copytree(REPO_ROOT / "profiles", tmp_path / "profiles")
    return tmp_path


def test_the_project_ships_a_bf16_and_an_fp16_gpu_profile_of_contract_settings_only() -> None:
    assert list_profiles(REPO_ROOT) == ["gpu", "gpu-fp16", "multi-host"]
    gpu, fp16 = (load_profile(REPO_ROOT / "profiles" / f"{name}.yaml") for name in ("gpu", "gpu-fp16"))
    assert set(gpu) == set(fp16) == CONTRACT_KEYS
    assert gpu["train.precision"] == "bf16" and fp16["train.precision"] == "fp16"
    assert {key: value for key, value in gpu.items() if key != "train.precision"} == {
        key: value for key, value in fp16.items() if key != "train.precision"
    }
    assert gpu["train.device"] == gpu["teacher_embed.device"] == "cuda"
    assert gpu["runtime.nproc"] == "auto" and gpu["runtime.pin_memory"] is True
    text = (REPO_ROOT / "profiles" / "gpu.yaml").read_text(encoding="utf-8")
    assert all("#" in line for line in text.splitlines() if line.startswith("  ")), "every setting has a comment"


def test_a_profile_is_deep_merged_keeping_comments_and_every_other_setting(project: Path) -> None:
    params_file = project / "params.yaml"
    before = yaml.safe_load(PARAMS)
    values = apply_profile(params_file, "gpu")
    assert values == load_profile(project / "profiles" / "gpu.yaml")
    after = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    for dotted, value in values.items():
        section, key = dotted.split(".")
        assert after[section][key] == value
        before[section][key] = value
    assert after == before  # nothing else changed (steps, loss, log_every, languages)
    text = params_file.read_text(encoding="utf-8")
    for comment in ("# a params file", "# targets", "# cpu or cuda", "# training processes per host"):
        assert comment in text
    assert "languages: [de, es]" in text
    assert "nproc: auto" in text
    apply_profile(params_file, "gpu-fp16")  # one over another: the last one's values
    assert yaml.safe_load(params_file.read_text(encoding="utf-8"))["train"]["precision"] == "fp16"


def test_a_profile_naming_a_setting_params_yaml_lacks_is_refused_and_nothing_is_written(project: Path) -> None:
    own = project / "mine.yaml"
    own.write_text("train:\n  batch_size: 64\n  devices: cuda\nruntime:\n  gpus: 2\n", encoding="utf-8")
    with pytest.raises(XdistillError) as refused:
        apply_profile(project / "params.yaml", str(own))
    message = str(refused.value)
    assert str(own) in message and str(project / "params.yaml") in message
    assert "train.devices, runtime.gpus are not settings of" in message
    assert (project / "params.yaml").read_text(encoding="utf-8") == PARAMS


def test_a_value_of_another_kind_an_unknown_name_and_a_non_mapping_are_refused(project: Path) -> None:
    params_file = project / "params.yaml"
    for text, problem in (
        ("train:\n  batch_size: big\n", r"train.batch_size is a number \(32\), not a text \('big'\)"),
        ("- train\n", "must be a mapping of params.yaml sections, not list"),
        ("train: [\n", "not valid YAML"),
    ):
        (project / "bad.yaml").write_text(text, encoding="utf-8")
        with pytest.raises(XdistillError, match=rf"profile {project / 'bad.yaml'}: .*{problem}"):
            apply_profile(params_file, str(project / "bad.yaml"))
    with pytest.raises(
        XdistillError,
        match=r"unknown profile 'gpu-bf16': no .*gpu-bf16.yaml \(profiles there: gpu, gpu-fp16, multi-host\)",
    ):
        apply_profile(params_file, "gpu-bf16")
    assert params_file.read_text(encoding="utf-8") == PARAMS


def test_auto_may_replace_a_number_and_a_number_auto(project: Path) -> None:
    from xdistill.params_file import write_params

    params_file = project / "params.yaml"
    write_params(params_file, {"runtime.nproc": "auto"})
    write_params(params_file, {"runtime.nproc": 2})
    assert yaml.safe_load(params_file.read_text(encoding="utf-8"))["runtime"]["nproc"] == 2
    with pytest.raises(ValueError, match="runtime.nproc is a number"):
        write_params(params_file, {"runtime.nproc": "all"})


def test_the_real_params_yaml_takes_each_profile_and_every_stage_accepts_the_result(tmp_path: Path) -> None:
    for name in list_profiles(REPO_ROOT):
        shutil.copy(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")
        apply_profile(tmp_path / "params.yaml", str(REPO_ROOT / "profiles" / f"{name}.yaml"))
        params = yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
        check_stage_params(params, tmp_path / "params.yaml")
        if name.startswith("gpu"):
            assert params["train"]["device"] == "cuda"
        else:  # multi-host: the tracking server of each host's environment (docs/multi-host.md)
            assert params["register"]["tracking_uri"] == "env:MLFLOW_TRACKING_URI"


def test_the_cli_lists_and_applies_profiles(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params_file = project / "params.yaml"
    assert main(["profile", "--params", str(params_file)]) == 0
    assert capsys.readouterr().out.split() == ["gpu", "gpu-fp16", "multi-host"]
    assert main(["profile", "gpu-fp16", "--params", str(params_file)]) == 0
    out = capsys.readouterr().out
    assert 'train.precision: "fp16"' in out and "profile gpu-fp16 applied (12 settings)" in out
    assert yaml.safe_load(params_file.read_text(encoding="utf-8"))["runtime"]["loader_workers"] == 4
    assert main(["profile", "tpu", "--params", str(params_file)]) == 2
    assert capsys.readouterr().err.startswith("error: unknown profile 'tpu'")
