// Issue 37, items 2 and 3: an MMEngine config is Python code. The loader runs
// it once per command, in its own process group, under a time, memory and
// output limit (cli/mmengine_loader.h), and only through an interpreter no
// other user can write. mmengine is not needed here: a stand-in interpreter
// runs the config itself (`python -c LOADER CONFIG` -> `python3 CONFIG`), so
// the config's code decides what "the loader" does.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_harness.h"

namespace headroom {
namespace {

using namespace cli_harness;  // NOLINT(google-build-using-namespace): test helpers

const std::string kData = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/";

// A folder with the stand-in interpreter; configs go beside it.
struct LoaderFixture {
  TempDir dir;
  std::string python = dir.file("python");
  LoaderFixture() {
    write_text(python, "#!/bin/sh\nexec python3 \"$3\"\n");
    fs::permissions(python, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  }
  std::string config(const std::string& name, const std::string& code) const {
    write_text(dir.file(name), code);
    return dir.file(name);
  }
  // `headroom ARGS` with the stand-in interpreter and `limits` ("NAME=value ...").
  RunOutput run(const std::string& args, const std::string& limits = "") const {
    return run_headroom(args, "HEADROOM_PYTHON=" + quoted(python) + " " + limits);
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether process `pid` still runs (a zombie waiting for its reaper does not).
bool running(const std::string& pid) {
  const std::string stat = read_text("/proc/" + pid + "/stat");
  if (stat.empty()) return false;
  const size_t state = stat.rfind(')') + 2;
  return state < stat.size() && stat[state] != 'Z';
}

}  // namespace

TEST_CASE("a config that never ends is stopped at HEADROOM_CONFIG_TIMEOUT_S, naming the file and the limit") {
  LoaderFixture f;
  const std::string loop = f.config("loop.py", "while True:\n    pass\n");
  const auto start = std::chrono::steady_clock::now();
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(loop), "HEADROOM_CONFIG_TIMEOUT_S=1");
  CHECK(seconds_since(start) < 5);
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, loop + ": the config (Python code) ran longer than 1 s"), run.err);
  CHECK(contains(run.err, "HEADROOM_CONFIG_TIMEOUT_S"));
  const RunOutput bad = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(loop), "HEADROOM_CONFIG_TIMEOUT_S=soon");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "HEADROOM_CONFIG_TIMEOUT_S=soon: expected a positive whole number"));
}

TEST_CASE("a config that leaves a child running does not keep headroom waiting, and the child is ended") {
  LoaderFixture f;
  const std::string pid_file = f.dir.file("child.pid");
  const std::string forks = f.config("fork.py", "import os, sys, time\n"
                                                "pid = os.fork()\n"
                                                "if pid == 0:\n"
                                                "    time.sleep(30)\n"
                                                "    os._exit(0)\n"
                                                "open(" + nlohmann::json(pid_file).dump() + ", 'w').write(str(pid))\n"
                                                "sys.stdout.write(open(" +
                                                    nlohmann::json(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json").dump() +
                                                    ").read())\n");
  const auto start = std::chrono::steady_clock::now();
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(forks) + " --json");
  CHECK(seconds_since(start) < 10);
  CHECK_MESSAGE(run.exit_code == 0, run.err);
  const std::string child = read_text(pid_file);
  REQUIRE_FALSE(child.empty());
  bool ended = false;
  for (int wait = 0; wait < 50 && !ended; ++wait) {  // SIGKILL is sent; its delivery is asynchronous
    ended = !running(child);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(ended);
}

namespace {

// A config whose grandchild leaves the loader's process group (setsid), writes
// its pid and then runs `tail` (Python: what it does next); checks that it is
// gone within 3 s of headroom's exit.
void check_escaped_grandchild_ended(const std::string& tail) {
  LoaderFixture f;
  const std::string pid_file = f.dir.file("sleeper.pid");
  const std::string escapes = f.config(
      "escape.py", "import os, sys, time\n"
                   "pid = os.fork()\n"
                   "if pid == 0:\n"
                   "    os.setsid()\n"  // its own session and group: out of the loader's group
                   "    if os.fork() == 0:\n"
                   "        open(" + nlohmann::json(pid_file + ".tmp").dump() + ", 'w').write(str(os.getpid()))\n"
                   "        os.rename(" + nlohmann::json(pid_file + ".tmp").dump() + ", " +
                   nlohmann::json(pid_file).dump() + ")\n"
                   "        " + tail + "\n"
                   "    os._exit(0)\n"
                   "os.waitpid(pid, 0)\n"
                   "while not os.path.exists(" + nlohmann::json(pid_file).dump() + "):\n"
                   "    time.sleep(0.01)\n"
                   "sys.stdout.write(open(" +
                   nlohmann::json(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json").dump() + ").read())\n");
  const auto start = std::chrono::steady_clock::now();
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(escapes) + " --json");
  CHECK(seconds_since(start) < 10);
  CHECK_MESSAGE(run.exit_code == 0, run.err);
  const std::string sleeper = read_text(pid_file);
  REQUIRE_FALSE(sleeper.empty());
  bool ended = false;
  for (int wait = 0; wait < 150 && !ended; ++wait) {  // within 3 s of headroom's exit
    ended = !running(sleeper);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(ended);
  if (!ended) kill(std::stoi(sleeper), SIGKILL);  // never leave it behind
}

}  // namespace

TEST_CASE("a config's child that leaves the loader's process group (setsid) is ended too") {
  check_escaped_grandchild_ended("time.sleep(60)");
}

TEST_CASE("a config's child that leaves the group and clears its environment (no mark) is ended too") {
  // execve with an empty environment drops HEADROOM_BOUNDED_CHILD: found by its start time.
  check_escaped_grandchild_ended("os.execve('/bin/sleep', ['sleep', '60'], {})");
}

TEST_CASE("a config that wants more memory than HEADROOM_CONFIG_MEMORY_MIB fails with MemoryError, saying the limit") {
  LoaderFixture f;
  const std::string hungry = f.config("hungry.py", "x = bytearray(16 << 30)\n");
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(hungry), "HEADROOM_CONFIG_MEMORY_MIB=512");
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, hungry + ": MemoryError"), run.err);
  CHECK(contains(run.err, "512 MiB of address space; HEADROOM_CONFIG_MEMORY_MIB"));
}

TEST_CASE("the loader's output is capped and its depth limited, and its stderr is shown as one short line") {
  LoaderFixture f;
  const std::string big = f.config("big.py", "import sys\nsys.stdout.write('x' * (40 << 20))\n");
  const RunOutput large = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(big));
  CHECK(large.exit_code == 2);
  CHECK_MESSAGE(contains(large.err, "printed more than 16 MiB and was stopped"), large.err);
  const std::string deep = f.config("deep.py", "print('[' * 100000 + ']' * 100000)\n");
  const RunOutput nested = f.run("fit llama-3-8b --gpu 4090 --mmengine " + quoted(deep));
  CHECK(nested.exit_code == 2);
  CHECK_MESSAGE(contains(nested.err, "JSON nested deeper than 64"), nested.err);
  const std::string noisy = f.config("noisy.py", "import sys\nsys.stderr.write('e' * (1 << 20))\nsys.exit(3)\n");
  const RunOutput loud = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(noisy));
  CHECK(loud.exit_code == 2);  // its own exit 3 is not "mmengine missing"
  CHECK_FALSE(contains(loud.err, "HEADROOM_PYTHON"));
  CHECK(loud.err.size() < 500);
}

TEST_CASE("a config runs once per command, even for plan --emit xtuner, and the notes say it ran as code") {
  LoaderFixture f;
  const std::string count = f.dir.file("runs");
  const std::string config = f.config("sft.py", "import sys\nopen(" + nlohmann::json(count).dump() + ", 'a').write('x')\n"
                                                "sys.stdout.write(open(" +
                                                    nlohmann::json(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json").dump() +
                                                    ").read())\n");
  const RunOutput run = f.run("plan llama-3-8b --gpu 4090 --xtuner " + quoted(config) + " --emit xtuner");
  CHECK_MESSAGE(run.exit_code == 0, run.err);
  CHECK(read_text(count) == "x");
  CHECK(contains(run.err, config + " was run as Python code"));
}

TEST_CASE("an interpreter another user can write is refused before the config runs") {
  LoaderFixture f;
  const std::string count = f.dir.file("runs");
  const std::string config = f.config("c.py", "open(" + nlohmann::json(count).dump() + ", 'a').write('x')\n");
  fs::permissions(f.python, fs::perms::others_write, fs::perm_options::add);
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(config));
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, "is writable by every user"), run.err);
  CHECK_FALSE(fs::exists(count));
}

namespace {

// The NUL-separated words of `path`.
std::vector<std::string> nul_words(const std::string& path) {
  std::vector<std::string> words;
  std::istringstream in(read_text(path));
  for (std::string word; std::getline(in, word, '\0');) words.push_back(word);
  return words;
}

}  // namespace

TEST_CASE("the loader is never a file at a build path: a copy of headroom elsewhere runs python3 -c with its code") {
  // Issue 37 item 2: headroom ran <build tree>/.venv/bin/python <build tree>/scripts/exporter/
  // read_mmengine_config.py, paths another user might later create. A copy of the binary far from
  // any checkout, with no HEADROOM_PYTHON, must take python3 from PATH and hand it the code itself.
  TempDir dir;
  const std::string bin = dir.file("bin");
  fs::create_directories(bin);
  fs::copy_file(HEADROOM_BINARY, bin + "/headroom");
  const std::string log = dir.file("argv");
  // A python3 first on PATH that records how it was started, then runs the config as the loader would.
  write_text(bin + "/python3", "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > " + quoted(log) +
                                   "\nPATH=${PATH#*:} exec python3 \"$3\"\n");
  fs::permissions(bin + "/python3", fs::perms::owner_all);
  const std::string config = dir.file("sft.py");
  write_text(config, "import sys\nsys.stdout.write(open(" +
                         nlohmann::json(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json").dump() +
                         ").read())\n");
  const std::string command = "cd " + quoted(dir.str()) + " && env -u HEADROOM_PYTHON PATH=" + quoted(bin) +
                              ":\"$PATH\" " + quoted(bin + "/headroom") + " fit llama-3-8b --gpu 4090 --xtuner " +
                              quoted(config) + " --json > out.json 2> err.txt";
  const int status = std::system(command.c_str());
  CHECK_MESSAGE(status == 0, read_text(dir.file("err.txt")));
  const std::vector<std::string> argv = nul_words(log);
  REQUIRE(argv.size() == 4);
  CHECK(argv[0] == bin + "/python3");
  CHECK(argv[1] == "-c");
  CHECK(contains(argv[2], "Config.fromfile"));  // the loader's code, not a path to it
  CHECK(contains(argv[2], "\ndef main("));
  CHECK(argv[3] == config);
  for (const std::string& word : argv) CHECK_FALSE(contains(word, std::string(HEADROOM_SOURCE_DIR) + "/"));
}

TEST_CASE("--help of fit and plan says an MMEngine config runs as Python code, and the loader's limits") {
  for (const char* command : {"fit", "plan"}) {
    CAPTURE(command);
    const RunOutput help = run_headroom(std::string(command) + " --help");
    CHECK(help.exit_code == 0);
    CHECK(contains(help.out, "RUNS AS PYTHON CODE"));
    CHECK(contains(help.out, "HEADROOM_CONFIG_TIMEOUT_S"));
  }
}

namespace {

// A stand-in mmengine package (its Config.fromfile exec()s the config), so the
// real loader runs, imports it and then the config: what the loader reports
// about the config, not about mmengine, is what these tests see.
struct StubMmengine {
  TempDir dir;
  StubMmengine() {
    fs::create_directories(dir.file("mmengine/config"));
    write_text(dir.file("mmengine/__init__.py"), "__version__ = '0.0.0+stub'\n");
    write_text(dir.file("mmengine/config/lazy.py"), "class LazyObject: pass\nclass LazyAttr: pass\n");
    write_text(dir.file("mmengine/config/__init__.py"),
               "import types\n"
               "class DictAction: pass\n"
               "class Config(dict):\n"
               "    @staticmethod\n"
               "    def fromfile(path):\n"
               "        scope = {}\n"
               "        exec(compile(open(path).read(), path, 'exec'), scope)\n"
               "        return Config({k: v for k, v in scope.items()\n"
               "                       if not k.startswith('__') and not isinstance(v, types.ModuleType)})\n"
               "    def to_dict(self):\n"
               "        return dict(self)\n");
  }
  // `headroom ARGS` with python3 and this mmengine on its path.
  RunOutput run(const std::string& args) const {
    return run_headroom(args, "HEADROOM_PYTHON=python3 PYTHONPATH=" + quoted(dir.str()));
  }
};

}  // namespace

TEST_CASE("a config that exits with status 3 is reported as that, not as mmengine missing (issue 37 item 8)") {
  StubMmengine mmengine;
  LoaderFixture f;
  const std::string exits = f.config("exits.py", "import sys\nsys.stderr.write('config says bye\\n')\nsys.exit(3)\n");
  const RunOutput run = mmengine.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(exits));
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, exits + ": the config exited with status 3 (sys.exit) while MMEngine loaded it"),
                run.err);
  CHECK_FALSE(contains(run.err, "needs mmengine"));
  CHECK_FALSE(contains(run.err, "HEADROOM_PYTHON"));
  // os._exit leaves the loader no word to say: the silence is reported as the config's.
  const std::string quits = f.config("quits.py", "import os\nos._exit(3)\n");
  const RunOutput silent = mmengine.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(quits));
  CHECK(silent.exit_code == 2);
  CHECK_MESSAGE(contains(silent.err, "exited with status 3 without a message (the config's code may have ended it"),
                silent.err);
  CHECK_FALSE(contains(silent.err, "HEADROOM_PYTHON"));
  // Loaded through the stand-in, a config of plain values reaches the XTuner reader.
  const std::string plain = f.config("plain.py", "batch_size = 4\n");
  const RunOutput read = mmengine.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(plain));
  CHECK_FALSE(contains(read.err, "exited with status"));
  CHECK_MESSAGE(contains(read.err, "--xtuner: " + plain), read.err);
}

TEST_CASE("a Python without mmengine is reported as that, before the config runs") {
  LoaderFixture f;
  const std::string count = f.dir.file("runs");
  const std::string config = f.config("c.py", "open(" + nlohmann::json(count).dump() + ", 'a').write('x')\n");
  const RunOutput run = run_headroom("fit llama-3-8b --gpu 4090 --xtuner " + quoted(config),
                                     "HEADROOM_PYTHON=python3 PYTHONPATH=" + quoted(f.dir.str()));
  if (run.exit_code == 2) {
    MESSAGE("skipped: python3 here has mmengine");
    return;
  }
  CHECK(run.exit_code == 1);
  CHECK_MESSAGE(contains(run.err, "reading an MMEngine config needs mmengine"), run.err);
  CHECK(contains(run.err, "set HEADROOM_PYTHON to a Python with mmengine"));
  CHECK_FALSE(fs::exists(count));
}

TEST_CASE("no output may replace a file an MMEngine config read while it loaded, such as its _base_ (issue 37 item 1)") {
  StubMmengine mmengine;
  LoaderFixture f;
  // The config takes its keys from another file, as a _base_ file gives them.
  const std::string base = f.dir.file("base.json");
  fs::copy_file(kData + "xtuner/llama3_8b_instruct_qlora_alpaca_e3.dump.json", base);
  const std::string before = read_text(base);
  const std::string config = f.config("sft.py", "import json\nglobals().update(json.load(open(" +
                                                    nlohmann::json(base).dump() + "))['config'])\n");
  const std::string xtuner = " llama-3-8b --gpu 4090 --xtuner " + quoted(config);
  const RunOutput beside = mmengine.run("fit" + xtuner + " -o " + quoted(f.dir.file("plan.json")));
  CHECK_MESSAGE(beside.exit_code == 0, beside.err);  // it reads, and the plan is written beside it
  const std::string named = "is the same file as --xtuner " + config + ": read while it loaded " + base;
  const RunOutput output = mmengine.run("fit" + xtuner + " -o " + quoted(base));
  CHECK(output.exit_code == 2);
  CHECK_MESSAGE(contains(output.err, "-o " + base + ": " + named), output.err);
  const RunOutput emit = mmengine.run("plan" + xtuner + " --emit xtuner=" + quoted(base));
  CHECK(emit.exit_code == 2);
  CHECK_MESSAGE(contains(emit.err, "--emit xtuner " + base + ": " + named), emit.err);
  CHECK(read_text(base) == before);
  // The .py itself (issue 37: an XTuner .py became one comment line).
  const std::string code = read_text(config);
  const RunOutput over_config = mmengine.run("plan" + xtuner + " --emit xtuner=" + quoted(config));
  CHECK(over_config.exit_code == 2);
  CHECK_MESSAGE(contains(over_config.err, "is the same file as --xtuner"), over_config.err);
  CHECK(read_text(config) == code);
}

TEST_CASE("a directory, FIFO or device named x.py is refused as not a regular file, not as missing (issue 37 item 8)") {
  LoaderFixture f;
  const std::string directory = f.dir.file("dir.py");
  fs::create_directory(directory);
  const std::string fifo = f.dir.file("fifo.py");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::string device = f.dir.file("null.py");
  fs::create_symlink("/dev/null", device);
  for (const std::string& config : {directory, fifo, device}) {
    CAPTURE(config);
    const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(config));
    CHECK(run.exit_code == 2);
    CHECK_MESSAGE(contains(run.err, config + ": not a regular file (expected an MMEngine config .py)"), run.err);
    CHECK_FALSE(contains(run.err, "No such file"));
  }
}

TEST_CASE("a config of more than 1 MiB of code is refused before it runs (issue 37 item 3)") {
  LoaderFixture f;
  const std::string count = f.dir.file("runs");
  const std::string code = "open(" + nlohmann::json(count).dump() + ", 'a').write('x')\n";
  const std::string big = f.config("big.py", code + std::string((1 << 20) + 1 - code.size(), '#'));
  const RunOutput run = f.run("fit llama-3-8b --gpu 4090 --xtuner " + quoted(big));
  CHECK(run.exit_code == 2);
  CHECK_MESSAGE(contains(run.err, big + ": 1048577 bytes; expected an MMEngine config of at most 1 MiB"), run.err);
  CHECK_FALSE(fs::exists(count));
}

}  // namespace headroom
