// Descendants of a bounded child that left its process group (a config that
// double-forks and calls setsid): the group kill cannot reach them, so this
// process becomes their reaper and ends those it did not start itself: by the
// mark they inherited in their environment, or, when they cleared it, by their
// start time (cli/bounded_child.h, end_escaped_descendants). Linux only.
#pragma once

#include <sys/types.h>

#include <string>

namespace headroom::cli {

// "HEADROOM_BOUNDED_CHILD=<pid>-<n>": new for every call, put in the child's
// environment, inherited by everything it starts that keeps its environment.
std::string new_descendant_mark();

// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): orphans below
// it are re-parented to it rather than to init. False when the kernel refused.
bool become_subreaper();

// The start time of process `pid` (clock ticks after boot, proc(5)), read
// while it runs; ULLONG_MAX when unreadable, so that only marks count.
unsigned long long start_time_of(pid_t pid);

// Kills and reaps every child of this process whose environment holds `mark`
// or that started at or after `child_start` (the bounded child's start time:
// only for a process whose children are all its own), again as the ones
// killed leave orphans of their own, until none has appeared for a short
// while (bounded: a config forking without end is cut off).
void end_escaped_children(const std::string& mark, unsigned long long child_start);

}  // namespace headroom::cli
