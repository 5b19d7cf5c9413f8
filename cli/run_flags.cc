#include "cli/run_flags.h"

namespace headroom::cli {

void add_run_flags(CLI::App& command, CliOptions& options) {
  executor::RunOptions& run = options.run;
  command.add_option("--steps", run.steps, "optimizer steps to reach (a resumed run continues up to it)")
      ->capture_default_str();
  command.add_option("--data", run.data, "synthetic, or a token file of raw little-endian ids")
      ->capture_default_str();
  command.add_option("--token-bytes", run.token_bytes, "bytes per id in the token file: 2 or 4")
      ->capture_default_str();
  command.add_option("--lr", run.learning_rate, "AdamW learning rate")->capture_default_str();
  command.add_option("--weight-decay", run.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  command.add_option("--seed", run.seed, "initial weights and synthetic data")->capture_default_str();
  command.add_option("--device", run.device, "auto (CUDA when available), cpu or cuda")->capture_default_str();
  command.add_option("--cpu-threads", run.cpu_threads, "threads of the offloaded CPU AdamW (0: all cores)");
  command.add_option("--checkpoint-dir", run.checkpoint_dir,
                     "write training-state checkpoints here; DIR is locked while the job runs, so a second job on "
                     "it is refused at once (one job per directory)")
      ->type_name("DIR");
  command.add_option("--checkpoint-every", run.checkpoint_every, "steps between checkpoints (0: at the end only)");
  command.add_option("--keep", run.checkpoints_kept, "complete checkpoints kept")->capture_default_str();
  command.add_option("--resume", run.resume_dir,
                     "continue from the newest checkpoint in DIR (and save there, locked as with --checkpoint-dir)")
      ->type_name("DIR");
  command.add_option("--comm-timeout", run.comm_timeout_s,
                     "seconds a rank's collective waits for a silent peer before the job fails; a hung rank ends "
                     "the job after this plus 30 s")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  command.add_option("--nproc", options.nproc,
                     "start N ranks on this machine, as torchrun --nproc-per-node N does (the plan's GPU count)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command.add_option("--metrics", options.metrics_path, "append one JSON line per step to FILE")->type_name("FILE");
  command.add_option("--measurement-out", options.measurement_out,
                     "write the measured run for `headroom report --measurement` (docs/report.md)")
      ->type_name("FILE");
  command.add_option("--write-calibration", options.calibration_out,
                     "write the calibration file measured on this GPU (docs/calibration.md)")
      ->type_name("FILE");
}

}  // namespace headroom::cli
