"""The training callback and its plain-PyTorch equivalent on the CPU, with a
tiny transformers Llama built here: a run that cannot fit is refused before its
first step, a run that fits leaves a measurement file `headroom report` reads.
Skipped, saying so, when torch or transformers is not installed."""

import json
import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the callback tests need it")
transformers = pytest.importorskip("transformers", reason="transformers is not installed: the callback tests need it")

import headroom  # noqa: E402
from headroom.integrations.transformers import HeadroomCallback  # noqa: E402

SEQ = 16
# A6000 as the GPU predicted for; its CUDA context and cuBLAS workspace are in
# every prediction, so a budget of a few MiB above the context cannot fit even
# this model, while the card's 48 GB fits it with room to spare.
GPU = "a6000"


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config)


def dataset(count=16):
    generator = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(count):
        ids = torch.randint(0, 256, (SEQ,), generator=generator)
        rows.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(SEQ, dtype=torch.long)})
    return rows


def context_bytes():
    return headroom.fit("tiny-llama", {"gpu": GPU})["gpu"]["cuda_context_bytes"]


def tiny_budget_bytes():
    """A6000 memory that leaves 1 MiB above its CUDA context after the 5% safety margin."""
    # budget = memory x 0.95 must exceed the context (else it is a settings error); 1 MiB above it.
    return math.ceil((context_bytes() + (1 << 20)) / 0.95)


class StepCounter(transformers.TrainerCallback):
    def __init__(self):
        self.steps_begun = 0

    def on_step_begin(self, args, state, control, **kwargs):
        self.steps_begun += 1


def trainer_for(model, tmp_path, callback, max_steps=3, **arguments):
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                                          max_steps=max_steps, use_cpu=True, report_to=[], save_strategy="no",
                                          logging_steps=1, learning_rate=1e-3, **arguments)
    counter = StepCounter()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=[callback, counter])
    return trainer, counter


def parameters_of(model):
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters()}


def test_callback_refuses_a_run_that_cannot_fit_before_step_1(tmp_path):
    model = tiny_llama()
    before = parameters_of(model)
    callback = HeadroomCallback(gpu=GPU, gpu_memory_bytes=tiny_budget_bytes(), seq_len=SEQ)
    trainer, counter = trainer_for(model, tmp_path, callback)
    with pytest.raises(headroom.DoesNotFitError) as raised:
        trainer.train()
    message = str(raised.value)
    answer = raised.value.answer
    prediction = answer["as_given"]["prediction"]
    assert "does not fit; stopped before step 1" in message
    assert f"predicted peak {prediction['gpu_total_bytes'] / 2**30:.2f} GiB" in message
    assert f"budget of {prediction['gpu_budget_bytes'] / 2**30:.2f} GiB" in message
    assert prediction["gpu_total_bytes"] > prediction["gpu_budget_bytes"]
    # No step began, the optimizer never stepped, the weights are untouched.
    assert counter.steps_begun == 0
    assert trainer.state.global_step == 0
    assert all(torch.equal(before[name], parameter) for name, parameter in model.named_parameters())
    assert not callback.watch.steps


def test_callback_predicts_from_the_live_model_and_arguments(tmp_path):
    model = tiny_llama()
    callback = HeadroomCallback(gpu=GPU, seq_len=SEQ)
    trainer, _ = trainer_for(model, tmp_path, callback, max_steps=1, gradient_accumulation_steps=2)
    trainer.train()
    answer = callback.watch.answer
    settings = answer["as_given"]["settings"]
    assert settings["micro_batch"] == 2 and settings["grad_accum"] == 2 and settings["seq_len"] == SEQ
    assert settings["stack"] == "hf-trainer" and settings["mode"] == "full"
    model_counts = answer["as_given"]["prediction"]["model"]
    # The graph built from the live model's config.json has the live model's parameters (tied once).
    assert model_counts["total_parameters"] == model.num_parameters()
    assert model_counts["trainable_parameters"] == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_callback_measures_a_run_that_fits_for_headroom_report(tmp_path, cli):
    model = tiny_llama()
    callback = HeadroomCallback(gpu=GPU, seq_len=SEQ)
    trainer, counter = trainer_for(model, tmp_path, callback, max_steps=3)
    trainer.train()
    out = tmp_path / "out" / "headroom"
    measurement = json.loads((out / "measurement.json").read_text())
    assert counter.steps_begun == 3
    assert [step["step"] for step in measurement["steps"]] == [1, 2, 3]
    assert all(step["peak_reserved_bytes"] >= step["peak_allocated_bytes"] > 0 for step in measurement["steps"])
    assert all("loss" in step for step in measurement["steps"])
    assert measurement["prediction"]["gpu_total_bytes"] == callback.watch.answer["as_given"]["prediction"]["gpu_total_bytes"]
    assert measurement["measured"].startswith("cuda:" if torch.cuda.is_available() else "cpu:")
    read = headroom.read_measurement(out / "measurement.json")
    assert len(read["steps"]) == 3
    report = tmp_path / "report.html"
    status, _, err = cli("report", out / "plan.json", "-o", report, "--measurement", out / "measurement.json")
    assert status == 0, err
    assert "Predicted vs measured" in report.read_text()
    # The plan is the run as given, readable on its own: the model is the config.json beside it.
    plan = json.loads((out / "plan.json").read_text())
    assert plan["settings"]["model"] == str((out / "config.json").resolve())
    assert not list(out.glob(".*")), "no temporary files left"


def test_callback_reads_peft_adapters(tmp_path):
    peft = pytest.importorskip("peft", reason="peft is not installed")
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                              lora_dropout=0.0, task_type="CAUSAL_LM"))
    callback = HeadroomCallback(gpu=GPU, seq_len=SEQ)
    trainer, _ = trainer_for(model, tmp_path, callback, max_steps=1)
    trainer.train()
    answer = callback.watch.answer
    settings = answer["as_given"]["settings"]
    assert settings["mode"] == "lora" and settings["lora"]["rank"] == 4
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert answer["as_given"]["prediction"]["model"]["trainable_parameters"] == trainable
    assert (tmp_path / "out" / "headroom" / "adapter_config.json").exists()


def test_check_reads_a_bitsandbytes_model_as_qlora_with_its_preparation(tmp_path):
    """A 4-bit model (its config's quantization_config) is QLoRA; the dtypes of the
    weights bitsandbytes left unquantized say what the script did to them
    (docs/stacks.md, "QLoRA preparation"). The tiny model's linears stay 16-bit:
    headroom reads the config, not the weights."""
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                                          use_cpu=True, bf16=True, report_to=[])

    def settings_for(model, name):
        answer = headroom.check(model, training_args=args, gpu=GPU, seq_len=SEQ, out_dir=str(tmp_path / name))
        return answer["as_given"]["settings"]

    model = tiny_llama().to(torch.bfloat16)
    model.config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                        "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": False,
                                        "bnb_4bit_compute_dtype": "bfloat16"}
    settings = settings_for(model, "as-loaded")
    assert settings["mode"] == "qlora" and settings["nf4_double_quant"] is False
    assert settings["precision"] == "bf16" and settings["kbit_prep"] == "none"
    # TRL's peft_module_casting_to_bf16: the norms fp32, the embeddings bf16.
    for name, parameter in model.named_parameters():
        if "norm" in name:
            parameter.data = parameter.data.float()
    assert settings_for(model, "norms")["kbit_prep"] == "norms-fp32"
    # PEFT's prepare_model_for_kbit_training: every unquantized weight fp32, which
    # the Trainer's bf16 runs as autocast over fp32 weights.
    model.float()
    settings = settings_for(model, "peft")
    assert settings["mode"] == "qlora" and settings["precision"] == "bf16-amp" and "kbit_prep" not in settings


def test_callback_on_the_cpu_needs_a_gpu_named(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device names the GPU itself")
    trainer, counter = trainer_for(tiny_llama(), tmp_path, HeadroomCallback(seq_len=SEQ))
    with pytest.raises(headroom.SettingsError, match="gpu: no CUDA device"):
        trainer.train()
    assert counter.steps_begun == 0


def test_watch_refuses_before_the_first_step(tmp_path):
    model = tiny_llama()
    entered = []
    with pytest.raises(headroom.DoesNotFitError):
        with headroom.watch(model, {"micro_batch": 2, "optimizer": "adamw"}, gpu=GPU,
                            gpu_memory_bytes=tiny_budget_bytes(), seq_len=SEQ, out_dir=str(tmp_path)):
            entered.append(True)
    assert not entered
    assert not (tmp_path / "measurement.json").exists()


def test_watch_measures_a_plain_pytorch_loop(tmp_path, cli):
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = dataset(4)
    with headroom.watch(model, {"micro_batch": 2, "precision": "fp32"}, optimizer=optimizer, gpu=GPU, seq_len=SEQ,
                        out_dir=str(tmp_path)) as watch:
        for first in (0, 2):
            batch = {key: torch.stack([row[key] for row in rows[first:first + 2]]) for key in rows[0]}
            with watch.step() as step:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                step.loss = loss.item()
    measurement = headroom.read_measurement(tmp_path / "measurement.json")
    assert [s["step"] for s in measurement["steps"]] == [1, 2]
    if not torch.cuda.is_available():
        # Parameters and both AdamW moments (fp32) at the end of the step, gradients set to None.
        parameters = sum(p.numel() for p in model.parameters()) * 4
        assert measurement["steps"][0]["peak_allocated_bytes"] >= 3 * parameters
    status, _, err = cli("report", tmp_path / "plan.json", "-o", tmp_path / "r.html", "--measurement",
                         tmp_path / "measurement.json")
    assert status == 0, err


def test_measurement_is_never_written_over_a_symlink(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("keep")
    link = tmp_path / "measurement.json"
    link.symlink_to(target)
    with pytest.raises(headroom.HeadroomError, match="not a regular file"):
        headroom.write_json_atomic(str(link), {"a": 1})
    assert target.read_text() == "keep"
