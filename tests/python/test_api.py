"""headroom.fit / headroom.plan against `headroom fit/plan --json`: the same
inputs give the same document, and the same refusals the same message and exit
status. Needs no torch."""

import json
import warnings

import pytest

import headroom
from conftest import DATA

SETTINGS_CASES = [
    {"model": "llama-3-8b", "gpu": "4090", "mode": "qlora", "seq_len": 2048},
    {"model": "tiny-llama", "gpu": "a6000", "micro_batch": 4, "checkpointing": "every"},
    # Does not fit: the answer carries the alternative plan and suggestions.
    {"model": "llama-3-8b", "gpu": "3090", "mode": "full", "seq_len": 4096, "micro_batch": 4},
]


@pytest.mark.parametrize("settings", SETTINGS_CASES, ids=lambda s: f"{s['model']}-{s['gpu']}-{s.get('mode', 'full')}")
def test_fit_equals_cli_json(settings, tmp_path, cli_json):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    expected = cli_json("fit", "--settings", path)
    assert headroom.fit(settings=settings) == expected
    assert headroom.fit(settings=str(path)) == expected


def test_fit_of_a_run_that_does_not_fit_says_so(cli_json):
    answer = headroom.fit("llama-3-8b", {"gpu": "3090", "seq_len": 4096, "micro_batch": 4})
    assert answer["fits"] is False
    assert answer["alternative"] is not None
    assert answer["as_given"]["prediction"]["gpu_total_bytes"] > answer["as_given"]["prediction"]["gpu_budget_bytes"]


def test_plan_equals_cli_json(tmp_path, cli_json):
    expected = cli_json("plan", "tiny-llama", "--gpu", "a6000", "--global-batch", "16")
    answer = headroom.plan("tiny-llama", {"gpu": "a6000", "global_batch": 16})
    assert answer == expected
    assert answer["command"] == "plan" and answer["output_file"] is None and answer["found"]


def test_model_argument_overrides_the_settings_model(cli_json):
    expected = cli_json("fit", "gpt2", "--gpu", "a6000", "--batch", "2")
    assert headroom.fit("gpt2", {"model": "llama-3-8b", "gpu": "a6000", "micro_batch": 2}) == expected


def test_config_files_equal_cli_json(tmp_path, cli_json):
    args = DATA / "hf_trainer" / "training_args_qlora.json"
    adapter = DATA / "hf_trainer" / "adapter_config.json"
    expected = cli_json("fit", "llama-3-8b", "--gpu", "4090", "--seq", "1024", "--qlora", "--hf-args", args,
                        "--peft", adapter)
    # --qlora is a flag that wins over the files; in Python the settings are the base the files refine,
    # and a PEFT config keeps qlora as qlora.
    got = headroom.fit("llama-3-8b", {"gpu": "4090", "seq_len": 1024, "mode": "qlora"}, hf_args=args, peft=adapter,
                       notes=[])
    assert got == expected
    assert got["as_given"]["settings"]["lora"]["rank"] == 64


def test_deepspeed_and_torchtune_configs_equal_cli_json(cli_json):
    deepspeed = DATA / "deepspeed" / "zero2_offload_auto.json"
    expected = cli_json("plan", "llama-3-8b", "--gpu", "a6000", "--lora", "--deepspeed", deepspeed)
    assert headroom.plan("llama-3-8b", {"gpu": "a6000", "mode": "lora"}, deepspeed=deepspeed, notes=[]) == expected
    recipe = DATA / "torchtune" / "llama3_2_3B_lora_single_device.yaml"
    expected = cli_json("fit", "--torchtune", recipe, "--torchtune-set", "tokenizer.max_seq_len=2048",
                        "--gpu", "4090")
    got = headroom.fit(settings={"gpu": "4090"}, torchtune=recipe, torchtune_set=["tokenizer.max_seq_len=2048"],
                       notes=[])
    # The settings dict gives the GPU below the recipe; the recipe does not name one.
    assert got == expected


def test_xtuner_config_equals_cli_json(cli_json):
    # The dump MMEngine's loader prints for the seed story's XTuner LLaVA config
    # (tests/exporter/mmengine_loader.sh keeps it current), with XTuner's DeepSpeed file.
    xtuner = DATA / "xtuner" / "llava_llama3_8b_qlora_finetune.dump.json"
    deepspeed = DATA / "xtuner" / "deepspeed_zero2_offload.json"
    expected = cli_json("fit", "llava-llama-3-8b", "--xtuner", xtuner, "--deepspeed", deepspeed, "--gpu", "4090")
    got = headroom.fit("llava-llama-3-8b", {"gpu": "4090"}, xtuner=xtuner, deepspeed=deepspeed, notes=[])
    assert got == expected
    assert got["as_given"]["settings"]["scoped_lora"][0]["rank"] == 64


def test_mmengine_config_equals_cli_json(cli_json):
    # The dump MMEngine's loader prints for mmpretrain's resnet50_8xb32_in1k.py
    # (tests/exporter/mmengine_loader.sh keeps it current); it names its model.
    config = DATA / "mmpretrain" / "resnet50_8xb32_in1k.dump.json"
    expected = cli_json("fit", "--mmengine", config, "--gpu", "4090")
    got = headroom.fit(settings={"gpu": "4090"}, mmengine=config, notes=[])
    assert got == expected
    assert got["as_given"]["settings"]["model"] == "resnet-50"


def test_plan_emit_equals_cli_json(tmp_path, cli_json):
    expected = cli_json("plan", "llama-3-8b", "--gpu", "a6000", "--lora", "--emit", "deepspeed", "--emit", "torch")
    got = headroom.plan("llama-3-8b", {"gpu": "a6000", "mode": "lora"}, emit=["deepspeed", "torch"])
    assert got == expected
    assert json.loads(got["exports"]["deepspeed"])["zero_optimization"]["stage"] == got["best"]["config"]["zero_stage"]
    assert "def apply_headroom_plan" in got["exports"]["torch"]
    assert got["notes"]  # DeepSpeed's placeholders to edit


def test_plan_emit_writes_back_the_config_and_files(tmp_path, cli_json):
    args = DATA / "hf_trainer" / "training_args_qlora.json"
    adapter = DATA / "hf_trainer" / "adapter_config.json"
    # A 16 GiB budget: the plan changes the Trainer's batch and accumulation (at a current
    # bitsandbytes: the unversioned band's top, 0.43.1, fits no plan there).
    flags = ["llama-3-8b", "--gpu", "4090", "--gpu-mem", "16GiB", "--seq", "1024", "--qlora",
             "--versions", "bitsandbytes=0.50.2", "--hf-args", args, "--peft", adapter]
    expected = cli_json("plan", *flags, "--emit", "hf-args")
    got = headroom.plan("llama-3-8b", {"gpu": "4090", "gpu_memory_bytes": 16 * 2**30, "seq_len": 1024,
                                       "mode": "qlora", "versions": {"bitsandbytes": "0.50.2"}},
                        hf_args=args, peft=adapter, emit="hf-args", notes=[])
    assert got["exports"] == expected["exports"]
    assert "per_device_train_batch_size" in got["exports"]["hf-args"]
    written = tmp_path / "ds.json"
    got = headroom.plan("llama-3-8b", {"gpu": "a6000", "mode": "lora"}, emit=[f"deepspeed={written}"])
    assert got["exports"]["deepspeed"] == str(written)
    assert json.loads(written.read_text())["train_micro_batch_size_per_gpu"] == got["best"]["config"]["micro_batch"]


def test_plan_emit_refusals_write_nothing(tmp_path):
    written = tmp_path / "ds.json"
    with pytest.raises(headroom.SettingsError, match='unknown kind "yaml"'):
        headroom.plan("tiny-llama", {"gpu": "a6000"}, emit=[f"deepspeed={written}", "yaml"])
    assert not written.exists()  # every request is built before a file is written
    with pytest.raises(headroom.SettingsError, match="expected --torchtune FILE"):
        headroom.plan("tiny-llama", {"gpu": "a6000"}, emit=["torchtune"])


def test_plan_emit_over_its_input_is_refused(tmp_path):
    # Issue 37: an export over the config it is read from (here through a link) keeps the config.
    args = tmp_path / "args.json"
    args.write_text((DATA / "hf_trainer" / "training_args_qlora.json").read_text())
    link = tmp_path / "link.json"
    link.symlink_to(args)
    before = args.read_text()
    with pytest.raises(headroom.SettingsError, match="is the same file as --hf-args"):
        headroom.plan("llama-3-8b", {"gpu": "4090", "seq_len": 1024}, hf_args=args, emit=[f"hf-args={link}"])
    assert args.read_text() == before


def test_notes_are_the_cli_stderr_lines(cli):
    args = DATA / "hf_trainer" / "training_args_qlora.json"
    status, _, err = cli("fit", "llama-3-8b", "--gpu", "4090", "--seq", "1024", "--hf-args", args, "--json")
    assert status == 0
    expected = [line[len("headroom: "):] for line in err.splitlines() if line.startswith("headroom: ")]
    assert expected, "the TrainingArguments import has notes"
    notes = []
    headroom.fit("llama-3-8b", {"gpu": "4090", "seq_len": 1024}, hf_args=args, notes=notes)
    assert notes == expected
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        headroom.fit("llama-3-8b", {"gpu": "4090", "seq_len": 1024}, hf_args=args)
    assert [str(w.message) for w in caught if issubclass(w.category, headroom.HeadroomNote)] == expected


def cli_error(cli, *arguments):
    status, out, err = cli(*arguments)
    assert out == "" and err.startswith("headroom: ")
    return status, err[len("headroom: "):].rstrip("\n")


def test_bad_settings_key_names_it(tmp_path, cli):
    settings = {"model": "tiny-llama", "micro_bach": 2}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(settings))
    status, message = cli_error(cli, "fit", "--settings", path)
    with pytest.raises(headroom.SettingsError) as raised:
        headroom.fit(settings=str(path))
    assert raised.value.message == message and raised.value.exit_status == status == 2
    with pytest.raises(headroom.SettingsError, match="micro_bach.*did you mean \"micro_batch\"") as from_dict:
        headroom.fit(settings=settings)
    assert from_dict.value.message.startswith("the settings dict: settings.micro_bach: unknown key")
    assert isinstance(raised.value, ValueError)


def test_wrong_type_is_not_coerced():
    with pytest.raises(headroom.SettingsError, match="micro_batch"):
        headroom.fit(settings={"model": "tiny-llama", "micro_batch": True})
    with pytest.raises(headroom.SettingsError, match="micro_batch"):
        headroom.fit(settings={"model": "tiny-llama", "micro_batch": 1.5})


def test_unknown_gpu_is_the_cli_refusal(cli):
    status, message = cli_error(cli, "fit", "tiny-llama", "--gpu", "nope")
    with pytest.raises(headroom.HeadroomError) as raised:
        headroom.fit("tiny-llama", {"gpu": "nope"})
    assert not isinstance(raised.value, headroom.SettingsError)
    assert (raised.value.exit_status, raised.value.message) == (status, message) == (1, message)


def test_budget_below_the_context_is_the_cli_refusal(cli):
    status, message = cli_error(cli, "fit", "tiny-llama", "--gpu", "a6000", "--gpu-mem", "100MiB")
    with pytest.raises(headroom.SettingsError) as raised:
        headroom.fit("tiny-llama", {"gpu": "a6000", "gpu_memory_bytes": 100 << 20})
    assert (raised.value.exit_status, raised.value.message) == (status, message)


def test_missing_config_file_names_it():
    with pytest.raises(headroom.SettingsError, match="--hf-args: .*no-such-args.json"):
        headroom.fit("tiny-llama", {"gpu": "a6000"}, hf_args="no-such-args.json")


def test_a_nul_or_non_utf8_name_is_refused_not_cut(tmp_path):
    # Found auditing issue 37: "ds.json\0junk" read ds.json (the C++ side stops at the NUL)
    # while the message named the whole string; Python's open() refuses such a name.
    deepspeed = tmp_path / "ds.json"
    deepspeed.write_text((DATA / "deepspeed" / "zero2_seed.json").read_text())
    with pytest.raises(headroom.SettingsError, match="--deepspeed: .*holds a NUL character"):
        headroom.fit("llama-3-8b", {"gpu": "a100-80g"}, deepspeed=f"{deepspeed}\0junk", notes=[])
    with pytest.raises(headroom.SettingsError, match="MODEL: .*holds a NUL character"):
        headroom.fit("tiny\0llama", {"gpu": "4090"}, notes=[])
    with pytest.raises(headroom.SettingsError, match="--measurement: .*not UTF-8"):
        headroom.read_measurement(b"/tmp/\xff.json")


def test_settings_of_the_wrong_kind():
    with pytest.raises(TypeError, match="settings"):
        headroom.fit(settings=42)
    with pytest.raises(headroom.SettingsError, match="not JSON"):
        headroom.fit(settings={"model": "tiny-llama", "safety_margin": float("nan")})


def test_read_measurement(tmp_path):
    read = headroom.read_measurement(DATA / "measurement_example.json")
    assert read["format"] == "headroom.measurement" and read["steps"]
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"format": "headroom.measurement", "version": 1,
                               "steps": [{"step": 1, "peak_allocated_bytes": 10, "peak_reserved_bytes": 5,
                                          "step_ms": 1.0}]}))
    with pytest.raises(headroom.SettingsError, match=r"steps\[0\].peak_reserved_bytes"):
        headroom.read_measurement(bad)


def test_version_is_the_projects():
    assert headroom.__version__ == "0.1.0"
