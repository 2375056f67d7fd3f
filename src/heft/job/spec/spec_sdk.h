// What the cloud SDK's distribution dicts ask of the cluster (config/sdk_distribution.h),
// applied to a spec being validated (spec.cc): mpi.processes_per_host becomes
// cluster.processes_per_host, and mpi's or smdistributed.dataparallel's custom_mpi_options
// become cluster.custom_mpi_options. A value the cluster block already gives differently, or
// mpirun options without the mpirun launcher, is an error naming the distribution's field.
// Internal to the job layer.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "heft/config/sdk_distribution.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::job {

// `distribution` and `cluster`: the spec's nodes (for line numbers and for what was given).
void apply_sdk_launch(const config::SdkLaunch& launch, const YAML::Node& distribution,
                      const YAML::Node& cluster, SpecReader& reader, JobSpec& spec);

// The node at `field` ("distribution.mpi.processes_per_host") below `top` (the node of its
// first part), or the deepest present node on the way: where a message points.
YAML::Node field_node(const YAML::Node& top, const std::string& field);

}  // namespace heft::job
