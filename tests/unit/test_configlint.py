"""lint-config against verl's real config, read from the published 0.5.0 and 0.9.1 wheels."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import jsonschema  # noqa: F401 - the JSON output is plain data; validated by shape below
import pytest

from verlenv.cli import main
from verlenv.inside.configlint.kernels import in_paths
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
    engines = [f.message for f in findings if f.key == "actor_rollout_ref.rollout.name"]
    assert engines == ["rollout engine 'sglang' is not installed in this environment"]


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
    engines = [f.message for f in findings if f.key == "actor_rollout_ref.rollout.name"]
    assert engines == ["rollout engine 'sglang' is not installed in this environment"]


# attn_implementation: verl 0.9.1 defaults every model to flash_attention_2 (workers/config/model.py) and loads
# the critic's value head with it hard-coded (utils/model.py); the environment is a real site-packages directory.
ACTOR_ATTN = "actor_rollout_ref.model.override_config.attn_implementation"
CRITIC_ATTN = "critic.model.override_config.attn_implementation"
CONSOLE = "trainer.logger=[console]"


@pytest.fixture(scope="module")
def verl050() -> Path:
    return fetch_wheel("verl", "0.5.0", Cache(default_root()))


def _site(root: Path, *, dist: bool = True, extension: bool = True, fa3: bool = False) -> Path:
    """A site-packages laid out as pip leaves flash-attn: package, dist-info, and the extension beside them."""
    root.mkdir(parents=True)
    if dist:
        (root / "flash_attn").mkdir()
        (root / "flash_attn" / "__init__.py").write_text("__version__ = '2.8.3'\n")
        info = root / "flash_attn-2.8.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    if extension:
        (root / "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    if fa3:
        (root / "flash_attn_interface.py").write_text("def flash_attn_func(*a, **k): ...\n")
        info = root / "flash_attn_3-3.0.0b1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn_3\nVersion: 3.0.0b1\n")
    return root


def _attn(findings: list) -> dict:  # type: ignore[type-arg]
    return {f.key: f for f in findings if f.key.endswith("attn_implementation")}


def test_schema_reads_how_verl_picks_the_attention(verl091: Path, verl050: Path) -> None:
    new, old = load_schema(verl091), load_schema(verl050)
    assert (new.attention.default, new.attention.source) == ("flash_attention_2", "verl/workers/config/model.py")
    assert new.attention.overridable and new.attention.value_head == "flash_attention_2"
    assert (new.attention.flash_attn_extra, new.attention.flash_attn_pin) == ("fsdp", "flash-attn==2.8.3")
    # verl 0.5.0 passes flash_attention_2 itself in fsdp_workers.py: override_config does not reach it
    assert (old.attention.default, old.attention.overridable) == ("flash_attention_2", False)
    # the two models of the generated config that take override_config
    tree = new.tree
    assert tree["actor_rollout_ref"]["model"]["override_config"] == {} == tree["critic"]["model"]["override_config"]


def test_default_attention_without_flash_attn_names_key_value_and_fix(verl091: Path, tmp_path: Path) -> None:
    empty = in_paths([str(_site(tmp_path / "site", dist=False, extension=False))], "site-packages X")
    found = _attn(lint(load_schema(verl091), read_yaml(DATA / "gsm8k_ppo_0.9.1.yaml"), installed=False, kernels=empty))
    actor, critic = found[ACTOR_ATTN], found[CRITIC_ATTN]
    assert actor.severity == critic.severity == "error" and actor.location == "(verl defaults)"
    assert actor.message == (
        f"{ACTOR_ATTN} is 'flash_attention_2' (verl 0.9.1's default when override_config does not set it, "
        "verl/workers/config/model.py), and site-packages X cannot run it: the flash-attn distribution is not installed"
    )
    assert actor.fix.endswith(f"; or pass +{ACTOR_ATTN}=sdpa") and "flash-attn==2.8.3" in actor.fix
    assert "value-head model" in critic.message and "train without a critic" in critic.fix


def test_flash_attn_installed_with_its_extension_passes(verl091: Path, tmp_path: Path) -> None:
    full = in_paths([str(_site(tmp_path / "site"))], "site-packages X")
    assert lint(load_schema(verl091), read_yaml(DATA / "gsm8k_ppo_0.9.1.yaml"), installed=False, kernels=full) == []


def test_flash_attn_without_its_compiled_extension_is_named(verl091: Path, tmp_path: Path) -> None:
    broken = in_paths([str(_site(tmp_path / "site", extension=False))], "site-packages X")
    found = _attn(lint(load_schema(verl091), parse_overrides([CONSOLE]), installed=False, kernels=broken))
    assert found[ACTOR_ATTN].message.endswith(
        "flash-attn 2.8.3 has no compiled extension flash_attn_2_cuda*.so (a failed or CPU-only build)"
    )


def test_sdpa_for_the_actor_and_no_critic_needs_no_kernel(verl091: Path, tmp_path: Path) -> None:
    empty = in_paths([str(_site(tmp_path / "site", dist=False, extension=False))], "site-packages X")
    overrides = parse_overrides([CONSOLE, f"+{ACTOR_ATTN}=sdpa", "algorithm.adv_estimator=grpo"])
    assert lint(load_schema(verl091), overrides, installed=False, kernels=empty) == []


def test_the_critics_override_does_not_reach_verls_value_head_loader(verl091: Path, tmp_path: Path) -> None:
    empty = in_paths([str(_site(tmp_path / "site", dist=False, extension=False))], "site-packages X")
    overrides = parse_overrides([CONSOLE, f"+{ACTOR_ATTN}=sdpa", f"+{CRITIC_ATTN}=sdpa"])
    [critic] = lint(load_schema(verl091), overrides, installed=False, kernels=empty)
    assert critic.key == CRITIC_ATTN and critic.location.startswith("override #3")
    assert f"{CRITIC_ATTN}=sdpa does not reach it" in critic.message


def test_verl_050_passes_flash_attention_2_whatever_the_override(verl050: Path, tmp_path: Path) -> None:
    empty = in_paths([str(_site(tmp_path / "site", dist=False, extension=False))], "site-packages X")
    overrides = parse_overrides([CONSOLE, f"+{ACTOR_ATTN}=sdpa", "algorithm.adv_estimator=grpo"])
    [actor] = lint(load_schema(verl050), overrides, installed=False, kernels=empty)
    assert "override_config does not change it" in actor.message and "sdpa" not in actor.fix
    assert "[gpu] extra" in actor.fix


def test_engine_configs_that_carry_the_key_are_checked_too(verl091: Path, tmp_path: Path) -> None:
    # verl 0.9.1's VeOmni trainer config (from the same wheel) sets attn_implementation in its engine
    # configs; the reference model's follows the actor's through ${oc.select:...}.
    import dataclasses

    import yaml

    with zipfile.ZipFile(verl091) as wheel:
        tree = yaml.safe_load(wheel.read("verl/trainer/config/_generated_ppo_veomni_trainer.yaml"))
    schema = dataclasses.replace(load_schema(verl091), tree=tree)
    empty = in_paths([str(_site(tmp_path / "site", dist=False, extension=False))], "site-packages X")
    actor = "actor_rollout_ref.actor.veomni.attn_implementation"
    overrides = [CONSOLE, "algorithm.adv_estimator=grpo", f"+{ACTOR_ATTN}=sdpa"]
    found = _attn(lint(schema, parse_overrides(overrides), installed=False, kernels=empty))
    assert set(found) == {actor, "actor_rollout_ref.ref.veomni.attn_implementation"}  # no critic under GRPO
    assert found[actor].fix.endswith(f"or pass {actor}=sdpa")
    assert _attn(lint(schema, parse_overrides([*overrides, f"{actor}=sdpa"]), installed=False, kernels=empty)) == {}


def test_flash_attention_3_needs_flash_attn_3(verl091: Path, tmp_path: Path) -> None:
    overrides = parse_overrides([CONSOLE, f"+{ACTOR_ATTN}=flash_attention_3", "algorithm.adv_estimator=grpo"])
    without = in_paths([str(_site(tmp_path / "a"))], "site-packages A")
    [actor] = lint(load_schema(verl091), overrides, installed=False, kernels=without)
    assert actor.message.endswith("the flash-attn-3 distribution is not installed")
    assert actor.fix.endswith(f"or pass +{ACTOR_ATTN}=sdpa")
    with_fa3 = in_paths([str(_site(tmp_path / "b", fa3=True))], "site-packages B")
    assert lint(load_schema(verl091), overrides, installed=False, kernels=with_fa3) == []


@pytest.mark.parametrize(
    ("value", "severity", "fix"),
    [
        ("flash_attention2", "error", "did you mean 'flash_attention_2'?"),
        ("spda", "error", "did you mean 'sdpa'?"),
        ("xformers", "warning", "use sdpa (PyTorch's own) or flash_attention_2"),
    ],
)
def test_unknown_attention_values_are_reported_even_without_an_environment(
    verl091: Path, value: str, severity: str, fix: str
) -> None:
    overrides = parse_overrides([CONSOLE, f"+{ACTOR_ATTN}={value}", "algorithm.adv_estimator=grpo"])
    [actor] = lint(load_schema(verl091), overrides, installed=False)
    assert (actor.severity, actor.key, actor.fix) == (severity, ACTOR_ATTN, fix)
    assert f"is '{value}', which is none of the attention implementations" in actor.message


def test_wheel_lint_says_what_it_did_not_check(verl091: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = str(DATA / "gsm8k_ppo_0.9.1.yaml")
    code, report = _run(capsys, config, "--verl-wheel", str(verl091))
    assert code == 0 and report["findings"] == []
    assert [line.split(" is ")[0] for line in report["not_checked"]] == [ACTOR_ATTN, CRITIC_ATTN]
    assert all(line.endswith("it needs flash-attn") for line in report["not_checked"])
    site = _site(tmp_path / "site", extension=False)
    code, report = _run(capsys, config, "--verl-wheel", str(verl091), "--installed-from", str(site))
    assert code == 1 and report["not_checked"] == []
    assert {f["key"] for f in report["findings"]} == {ACTOR_ATTN, CRITIC_ATTN}


def test_installed_from_a_lock_or_a_manifest(verl091: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    locks = Path(__file__).resolve().parents[2] / "lockfiles"
    lock = locks / "cpu-smoke.lock"  # holds no flash-attn and builds none
    code, report = _run(capsys, CONSOLE, "--verl-wheel", str(verl091), "--installed-from", str(lock))
    assert code == 1 and f"the lock {lock} cannot run it: flash-attn is not in it" in report["findings"][0]["message"]
    built = locks / "verl0.9.1-vllm0.24.0-torch2.11.0-cu130.lock"  # builds flash-attn 2.8.3 from its sdist
    code, report = _run(capsys, CONSOLE, "--verl-wheel", str(verl091), "--installed-from", str(built))
    assert code == 0 and report["findings"] == [], report
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(_manifest({"flash-attn": "2.8.3", "torch": "2.11.0"})))
    code, report = _run(capsys, CONSOLE, "--verl-wheel", str(verl091), "--installed-from", str(manifest))
    assert code == 0 and report["findings"] == [], report


def test_installed_from_nothing_is_a_usage_error(verl091: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    nowhere = tmp_path / "nowhere"
    assert main(["lint-config", CONSOLE, "--verl-wheel", str(verl091), "--installed-from", str(nowhere)]) == 2
    assert "no such site-packages directory, manifest, lock or profile" in capsys.readouterr().err


def test_doctor_config_checks_the_site_it_inspects(
    verl091: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verlenv.inside.doctor.checks_install import check_config
    from verlenv.inside.doctor.model import Facts, Status

    site = _site(tmp_path / "site", dist=False, extension=False)
    with zipfile.ZipFile(verl091) as wheel:  # verl installed there, as pip leaves it
        wheel.extractall(site)
    monkeypatch.syspath_prepend(str(site))
    facts = Facts(site=site, manifest_file=tmp_path / "none.json", config=[CONSOLE, "algorithm.adv_estimator=grpo"])
    result = check_config(facts)
    assert result.status is Status.FAIL and result.summary == "1 error(s) in the verl config (verl 0.9.1)"
    [detail] = result.details
    assert f"{ACTOR_ATTN} is 'flash_attention_2'" in detail and f"this environment ({site}) cannot run it" in detail
    _site(tmp_path / "fa", extension=True)
    for item in (tmp_path / "fa").iterdir():
        item.rename(site / item.name)
    assert check_config(facts).status is Status.OK


def _manifest(distributions: dict[str, str]) -> dict:  # type: ignore[type-arg]
    return {
        "schema_version": 1,
        "profile": "p",
        "lock_sha256": "0" * 64,
        "verify_sha256": "0" * 64,
        "source_date_epoch": 0,
        "components": {},
        "distributions": distributions,
        "layers": {},
        "base": {},
        "verlenv_version": "0",
    }
