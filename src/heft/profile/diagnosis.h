// Hang diagnosis from the ranks' collective traces (comm/trace.h): for each communicator
// group, the oldest collective not finished everywhere, which ranks wait in it, which never
// entered it (and what they did last), and which peer the waiters wait on:
//
//   allreduce #1207 in the tensor group {2,3}: rank 3 never entered it (last: allreduce #1206,
//   done 31.0 s ago); rank 2 waits in it for rank 3 (for 30.9 s)
//
// A group is named by its parallel dimension (data, pipeline, tensor, replicate, shard, as
// parallel/mesh.h defines them) and its members when the device mesh labelled it (the
// rank-<R>.groups.json files parallel/mesh.h writes beside the traces); otherwise by its
// communicator name ("group fashion/world", "group fashion/world/split0/2"). Ranks in the text
// and in GroupDiagnosis are world ranks (as in the workers' logs), not ranks in the group.
//
// `heft diagnose JOB` prints it for a running or ended job; the supervisor adds it to the
// failure reason of a hang and to a stalled-training stop.
//
// Deliberately left out: traces of other machines (each host's job directory has its own).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heft::profile {

struct GroupDiagnosis {
  std::string group;           // the communicator's name ("fashion/world/split2/2")
  std::string dimension;       // "data", "pipeline", "tensor", "replicate", "shard"; a group
                               // that is the whole data dimension is "data" even when it is
                               // also the shard or replicate group; "" unlabelled
  std::vector<int> ranks;      // the members (world ranks, by group rank); empty unlabelled
  std::string label;           // "tensor group {2,3}" or "group fashion/world"
  int size = 0;
  bool stuck = false;          // a collective is not finished on every rank
  uint64_t seq = 0;            // that collective's sequence number (1-based)
  std::string op;              // its operation text ("allreduce(shm, 4096 B)")
  std::vector<int> waiting;    // ranks in it, not done
  std::vector<int> behind;     // ranks that never entered it
  std::vector<int> waited_for; // whom the waiting ranks wait on
  std::vector<std::string> lines;
};

struct Diagnosis {
  int traces = 0;  // files read
  std::vector<GroupDiagnosis> groups;
  bool stuck() const;
  // Every group's lines; "no collective traces in DIR" or "every rank finished ..." when
  // nothing is stuck.
  std::string text() const;
  nlohmann::json json() const;
};

// Reads every *.trace and *.groups.json file under `dir` (unreadable or foreign files are
// skipped; through job/job_file.h: links, FIFOs and devices are skipped unread, a trace is
// read for its fixed size, a label file up to 1 MiB; at most 16384 entries of `dir` are
// looked at); `now` in Unix seconds (for ages). Never waits on a worker's file.
Diagnosis diagnose(const std::string& dir, double now);

// "rank 3", "ranks 0-2", "ranks 0, 2, 5".
std::string ranks_text(std::vector<int> ranks);
// A group's members in braces, in the order given: "{2,3}", "{0-3}" (a run of more than two
// consecutive ascending ranks), "{0,4,8}".
std::string members_text(const std::vector<int>& ranks);

}  // namespace heft::profile
