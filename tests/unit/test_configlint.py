"""lint-config against verl's real config, read from the published 0.5.0 and 0.9.1 wheels."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema  # noqa: F401 - the JSON output is plain data; validated by shape below
import pytest

from verlenv.cli import main
from verlenv.inside.configlint.rules import lint
from verlenv.inside.configlint.schema import load_schema
from verlenv.inside.configlint.source import parse_overrides, read_yaml
from verlenv.wheels.cache import Cache, default_root
from verlenv.wheels.wheelhouse import fetch_wheel

DATA = Path(__file__).resolve().parents[1] / "data" / "verl-configs"


@pytest.fixture(scope="module", params=["0.5.0", "0.9.1"])
def wheel(request: pytest.FixtureRequest) -> Path:
    return fetch_wheel("verl", request.param, Cache(default_root()))


@pytest.fixture(scope="module")
def verl091() -> Path:
    return fetch_wheel("verl", "0.9.1", Cache(default_root()))


def _run(capsys, *args: str) -> tuple[int, dict]:  # type: ignore[no-untyped-def, type-arg]
    code = main(["lint-config", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_schema_comes_from_the_wheel_without_importing_verl(wheel: Path) -> None:
    schema = load_schema(wheel)
    assert schema.version == wheel.name.split("-")[1]
    assert "trainer" in schema.tree and "total_epochs" in schema.tree["trainer"]
    assert {"gae", "grpo"} <= schema.adv_estimators
    assert {"console", "wandb"} <= schema.loggers and {"vllm", "hf"} <= schema.rollout_names


def test_file_logger_exists_only_from_0_6(wheel: Path) -> None:
    schema = load_schema(wheel)
    assert ("file" in schema.loggers) == (schema.version != "0.5.0")


def test_clean_config_passes_with_exit_0(verl091: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(capsys, str(DATA / "gsm8k_ppo_0.9.1.yaml"), "--verl-wheel", str(verl091))
    assert code == 0, report
    assert report["findings"] == [] and report["verl_version"] == "0.9.1"


def test_the_must_show_typos(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(capsys, str(DATA / "typos.yaml"), "--verl-wheel", str(wheel))
    assert code == 1
    by_key = {f["key"]: f for f in report["findings"]}
    assert by_key["trainer.Total_epochs"]["fix"] == "did you mean 'trainer.total_epochs'?"
    assert by_key["trainer.Total_epochs"]["location"].endswith("typos.yaml:6")
    norm = by_key["algorithm.global_reward_norm"]
    assert "does not exist" in norm["message"] and "norm_adv_by_std_in_grpo" in norm["message"]
    assert norm["location"].endswith("typos.yaml:9")


def test_overrides_plain_plus_and_invented(verl091: Path) -> None:
    schema = load_schema(verl091)
    findings = lint(
        schema,
        parse_overrides(
            [
                "trainer.totl_epochs=1",
                "+trainer.totl_epochs=1",
                "+trainer.log_interval=5",
                "+trainer.total_epochs=3",
                "++trainer.total_epochs=3",
                "trainer.logger=[console]",
            ]
        ),
        installed=False,
    )
    messages = [(f.location.split("'")[1], f.message) for f in findings]
    assert "Hydra will refuse" in messages[0][1] and messages[0][0] == "trainer.totl_epochs=1"
    assert "never reads it" in messages[1][1]
    assert "verl logs every step" in messages[2][1]
    assert "Hydra refuses '+' for an existing key" in messages[3][1]
    assert len(findings) == 4  # ++ on an existing key is fine


def test_camel_case_and_wrong_types_and_enums(verl091: Path) -> None:
    schema = load_schema(verl091)
    findings = lint(
        schema,
        parse_overrides(
            [
                "trainer.saveFreq=10",
                "trainer.total_epochs=2.5",
                "algorithm.gamma=high",
                "algorithm.adv_estimator=grpoo",
                "trainer.logger=[console,wandbb]",
                "actor_rollout_ref.rollout.name=vllmm",
            ]
        ),
        installed=False,
    )
    fixes = {f.key: f.fix for f in findings}
    assert fixes["trainer.saveFreq"] == "did you mean 'trainer.save_freq'?"
    assert "verl expects int" in next(f.message for f in findings if f.key == "trainer.total_epochs")
    assert "verl expects float" in next(f.message for f in findings if f.key == "algorithm.gamma")
    assert fixes["algorithm.adv_estimator"] == "did you mean 'grpo'?"
    assert fixes["trainer.logger"] == "did you mean 'wandb'?"
    assert fixes["actor_rollout_ref.rollout.name"] == "did you mean 'vllm'?"


def test_engine_not_installed_is_an_error_inside_an_image(verl091: Path) -> None:
    schema = load_schema(verl091)
    findings = lint(
        schema, parse_overrides(["actor_rollout_ref.rollout.name=sglang", "trainer.logger=console"]), installed=True
    )
    assert [f.message for f in findings] == ["rollout engine 'sglang' is not installed in this environment"]


def test_logger_prerequisites(verl091: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = load_schema(verl091)
    for var in ("WANDB_API_KEY", "WANDB_MODE", "VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    found = lint(schema, parse_overrides(["trainer.logger=[wandb,file]"]), installed=False)
    assert [f.severity for f in found] == ["warning", "warning"]
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", "/shared/logs")
    assert lint(schema, parse_overrides(["trainer.logger=[wandb,file]"]), installed=False) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["data.train_batch_size=100"], "is not divisible by 8 GPUs"),
        (["data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=128"], "must be >="),
        (["data.train_batch_size=256", "actor_rollout_ref.actor.ppo_mini_batch_size=60"], "does not split over 8 GPUs"),
        (
            [
                "data.train_batch_size=256",
                "actor_rollout_ref.actor.ppo_mini_batch_size=64",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
            ],
            "not divisible by ppo_micro_batch_size_per_gpu (3)",
        ),
    ],
)
def test_batch_divisibility_that_verl_asserts(verl091: Path, overrides: list[str], expected: str) -> None:
    schema = load_schema(verl091)
    base = ["critic.ppo_mini_batch_size=64", "algorithm.adv_estimator=grpo"]
    found = lint(schema, parse_overrides(base + overrides), installed=False)
    assert any(expected in f.message for f in found), [f.message for f in found]


def test_verls_own_default_logger_needs_wandb_credentials(verl091: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    [finding] = lint(load_schema(verl091), parse_overrides(["trainer.total_epochs=1"]), installed=False)
    assert finding.location == "(verl defaults)" and "wandb" in finding.message


def test_batch_sizes_that_fit_pass(verl091: Path) -> None:
    schema = load_schema(verl091)
    ok = [
        "data.train_batch_size=256",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "trainer.logger=[console]",
        "algorithm.adv_estimator=grpo",
    ]
    assert lint(schema, parse_overrides(ok), installed=False) == []


def test_malformed_yaml_names_the_line(verl091: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint-config", str(DATA / "broken.yaml"), "--verl-wheel", str(verl091)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml:3:" in err and "not valid YAML" in err


def test_yaml_lines_are_reported(verl091: Path) -> None:
    settings = read_yaml(DATA / "typos.yaml")
    assert [(s.path, s.location.rsplit(":", 1)[1]) for s in settings if s.op == "yaml"] == [
        (("trainer", "Total_epochs"), "6"),
        (("algorithm", "global_reward_norm"), "9"),
    ]


def test_sglang_rollout_and_its_keys_are_linted_like_the_rest(verl091: Path) -> None:
    schema = load_schema(verl091)
    assert "sglang" in schema.rollout_names
    good = parse_overrides(
        [
            "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
            "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=fa3",  # SGLang's own kwargs: free-form
            "trainer.logger=[console]",
        ]
    )
    assert lint(schema, good, installed=False) == []
    typo = parse_overrides(["actor_rollout_ref.rollout.multi_turn.max_assistant_turn=3"])
    [finding] = [f for f in lint(schema, typo, installed=False) if f.severity == "error"]
    assert finding.severity == "error" and "actor_rollout_ref.rollout.multi_turn.max_assistant_turns" in finding.fix
    plain = parse_overrides(["actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=fa3"])
    [refused] = [f for f in lint(schema, plain, installed=False) if f.severity == "error"]
    assert "+actor_rollout_ref.rollout.engine_kwargs.sglang" in refused.fix
    bad_type = parse_overrides(["actor_rollout_ref.rollout.multi_turn.enable=maybe"])
    errors = [f.key for f in lint(schema, bad_type, installed=False) if f.severity == "error"]
    assert errors == ["actor_rollout_ref.rollout.multi_turn.enable"]


def test_sglang_named_where_it_is_not_installed_is_an_error(verl091: Path) -> None:
    overrides = ["actor_rollout_ref.rollout.name=sglang", "trainer.logger=[console]"]
    findings = lint(load_schema(verl091), parse_overrides(overrides), installed=True)
    assert [f.message for f in findings] == ["rollout engine 'sglang' is not installed in this environment"]
