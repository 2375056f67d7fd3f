// The SDK dicts' launch settings applied to a spec (spec_sdk.h).
#include "heft/job/spec/spec_sdk.h"

#include "heft/job/launch/local_launcher.h"

namespace heft::job {

YAML::Node field_node(const YAML::Node& top, const std::string& field) {
  YAML::Node at = top;
  const size_t first = field.find('.');
  std::string rest = first == std::string::npos ? "" : field.substr(first + 1);
  for (size_t dot; !rest.empty(); rest = dot == std::string::npos ? "" : rest.substr(dot + 1)) {
    dot = rest.find('.');
    if (!at.IsMap()) break;
    const YAML::Node next = at[rest.substr(0, dot)];
    if (!present(next)) break;
    at.reset(next);
  }
  return at;
}

void apply_sdk_launch(const config::SdkLaunch& launch, const YAML::Node& distribution,
                      const YAML::Node& cluster, SpecReader& r, JobSpec& spec) {
  ClusterSpec& c = spec.cluster;
  const bool cluster_map = present(cluster) && cluster.IsMap();
  if (launch.processes_per_host > 0) {
    const std::string field = "distribution.mpi.processes_per_host";
    const YAML::Node at = field_node(distribution, field);
    if (cluster_map && present(cluster["processes_per_host"]) &&
        c.processes_per_host != launch.processes_per_host)
      r.error(field, at, "expected cluster.processes_per_host (" +
                             std::to_string(c.processes_per_host) + ") or nothing, found " +
                             std::to_string(launch.processes_per_host) +
                             " (mpi.processes_per_host is the workers on each host)");
    else if (static_cast<long>(c.instance_count) * launch.processes_per_host > kMaxWorkers)
      r.error(field, at, "expected at most " + std::to_string(kMaxWorkers) +
                             " workers (instance_count x processes_per_host), found " +
                             std::to_string(static_cast<long>(c.instance_count) *
                                            launch.processes_per_host));
    else
      c.processes_per_host = launch.processes_per_host;
  }
  if (launch.custom_mpi_options.empty()) return;
  const std::string& field = launch.custom_mpi_options_field;
  const YAML::Node at = field_node(distribution, field);
  if (c.launcher != "mpirun")
    r.error(field, at, "mpirun's options need cluster.launcher: mpirun (mpirun then starts the "
                       "workers with them), found launcher " + c.launcher +
                       "; remove them or run the job under mpirun");
  else if (!c.custom_mpi_options.empty() && c.custom_mpi_options != launch.custom_mpi_options)
    r.error(field, at, "differs from cluster.custom_mpi_options ('" + c.custom_mpi_options +
                           "'); give the options once");
  else
    c.custom_mpi_options = launch.custom_mpi_options;
}

}  // namespace heft::job
