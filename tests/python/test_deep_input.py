"""Very deep input through the Python package raises, never kills the interpreter (issue 37 item 4).

The package calls the same C++ readers as `headroom` (tests/cli/deep_input_test.cc), in the
user's own process: a reader that recursed without a limit there ended the interpreter with
SIGSEGV. The calls run in a child interpreter, so that a crash fails this test with its
signal instead of ending pytest.
"""

import json
import subprocess
import sys
import textwrap

from conftest import DATA

# Each call, by name, then whether it raised headroom.SettingsError with a depth message.
CHILD = textwrap.dedent("""
    import json, sys
    import headroom

    paths = json.loads(sys.argv[1])
    deep_dict = 1
    for _ in range(200):
        deep_dict = {"a": deep_dict}
    deeper_dict = 1
    for _ in range(100_000):  # past Python's own recursion limit in json.dumps
        deeper_dict = {"a": deeper_dict}
    base = {"model": "llama-3-8b", "settings": {"gpu": "4090"}}
    calls = {
        "xtuner": lambda: headroom.fit(**base, xtuner=paths["arrays"], notes=[]),
        "mmengine": lambda: headroom.fit(**base, mmengine=paths["arrays"], notes=[]),
        "plan xtuner": lambda: headroom.plan(**base, xtuner=paths["arrays"], notes=[]),
        "torchtune_set": lambda: headroom.fit(settings={"gpu": "4090", "seq_len": 2048}, torchtune=paths["torchtune"],
                                              torchtune_set=["a" + ".a" * 59_999 + "=1"], notes=[]),
        "settings file": lambda: headroom.fit("llama-3-8b", paths["objects"], notes=[]),
        "settings dict": lambda: headroom.fit("llama-3-8b", {"gpu": "4090", "lora": deep_dict}, notes=[]),
        "settings dict past recursion": lambda: headroom.fit("llama-3-8b", {"gpu": "4090", "lora": deeper_dict},
                                                             notes=[]),
        "hf_args": lambda: headroom.fit(**base, hf_args=paths["objects"], notes=[]),
        "deepspeed": lambda: headroom.fit(**base, deepspeed=paths["objects"], notes=[]),
        "peft": lambda: headroom.fit(**base, peft=paths["objects"], notes=[]),
        "calibration": lambda: headroom.fit(**base, calibration=paths["objects"], notes=[]),
        "model config.json": lambda: headroom.fit(paths["model"], {"gpu": "4090"}, notes=[]),
        "accelerate": lambda: headroom.fit(**base, accelerate=paths["yaml"], notes=[]),
        "axolotl": lambda: headroom.fit(**base, axolotl=paths["yaml"], notes=[]),
        "llamafactory": lambda: headroom.fit(**base, llamafactory=paths["yaml"], notes=[]),
        "torchtune": lambda: headroom.fit(settings={"gpu": "4090"}, torchtune=paths["yaml"], notes=[]),
        "read_measurement": lambda: headroom.read_measurement(paths["objects"]),
    }
    for name, call in calls.items():
        try:
            call()
            print(json.dumps([name, "returned", ""]), flush=True)
        except Exception as error:
            print(json.dumps([name, type(error).__name__, str(error)[:2000]]), flush=True)
""")

DEPTH_WORDS = ("deeper than 64", "levels deep; expected at most 64", "nesting deeper than 64", "too deeply nested")


def test_deep_input_through_the_api_raises_settings_error(tmp_path):
    arrays = tmp_path / "arrays.json"
    arrays.write_text("[" * 1_000_000 + "]" * 1_000_000)
    objects = tmp_path / "objects.json"  # under every reader's size cap (1 MiB for calibration)
    objects.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("a: " + "[" * 1_000_000 + "]" * 1_000_000 + "\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(objects.read_text())
    paths = {"arrays": str(arrays), "objects": str(objects), "yaml": str(deep_yaml), "model": str(model),
             "torchtune": str(DATA / "torchtune" / "llama3_2_3B_lora_single_device.yaml")}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(paths)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"the interpreter ended with {done.returncode}: {done.stderr[-2000:]}"
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [name for name, _, _ in results] == ["xtuner", "mmengine", "plan xtuner", "torchtune_set",
                                                "settings file", "settings dict", "settings dict past recursion",
                                                "hf_args", "deepspeed", "peft", "calibration", "model config.json",
                                                "accelerate", "axolotl", "llamafactory", "torchtune",
                                                "read_measurement"]
    for name, kind, message in results:
        assert kind == "SettingsError", (name, kind, message)
        assert any(words in message for words in DEPTH_WORDS), (name, message)
        assert len(message) < 1000, (name, message[:300])
