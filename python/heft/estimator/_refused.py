"""The cloud SDK's arguments heft cannot honour, each with the values that mean "not used"
(accepted: they ask for nothing heft lacks) and why any other value is refused. Every
refusal is a ValueError naming the argument; an argument the SDK does not have is a
TypeError, as Python gives it. docs/porting.md shows this table."""

# name -> (values accepted as "not used", why another value is refused)
ESTIMATOR = {
    "volume_size": ((None, 30), "heft uses this machine's disk; no volume is provisioned"),
    "volume_kms_key": ((None,), "heft writes plain local files (private, mode 0600); no KMS"),
    "output_kms_key": ((None,), "heft writes plain local files (private, mode 0600); no KMS"),
    "keep_alive_period_in_seconds": ((None, 0), "heft has no warm pool: workers are "
                                     "processes started for each job"),
    "tags": ((None, [], ()), "heft's job database has no tags"),
    "subnets": ((None, [], ()), "no VPC: workers run on this machine or on the hosts of the "
                "cluster launcher"),
    "security_group_ids": ((None, [], ()), "no VPC: workers run on this machine or on the "
                           "hosts of the cluster launcher"),
    "encrypt_inter_container_traffic": ((None, False), "heft authenticates traffic between "
                                        "hosts (HMAC with the job token) but does not encrypt "
                                        "it"),
    "enable_network_isolation": ((None, False), "workers are processes of this machine; heft "
                                 "cannot cut their network"),
    "rules": ((None, [], ()), "heft's profiler rules are the job spec's `rules` "
              "(docs/observability.md); the SDK's rule objects are not translated"),
    "debugger_hook_config": ((None, False), "heft has no tensor hook (Debugger)"),
    "tensorboard_output_config": ((None,), "nothing is synced; write TensorBoard files under "
                                  "SM_OUTPUT_DATA_DIR"),
    "profiler_config": ((None,), "heft's profiler is set in the job spec (`profiler`); "
                        "disable_profiler=True turns it off"),
    "enable_sagemaker_metrics": ((None, True), "heft always records the metric series"),
    "git_config": ((None,), "heft runs local code: clone the repository and give source_dir"),
    "code_location": ((None,), "heft runs the code where it is; nothing is uploaded"),
    "dependencies": ((None, [], ()), "heft runs source_dir in place and copies nothing: put "
                     "the dependencies inside source_dir"),
    "instance_groups": ((None, [], ()), "heft's clusters are homogeneous: instance_count hosts "
                        "of processes_per_host workers"),
    "container_entry_point": ((None,), "heft runs no containers: give entry_point"),
    "container_arguments": ((None,), "heft runs no containers: give entry_point and "
                            "hyperparameters"),
    "training_repository_access_mode": ((None,), "heft runs no containers"),
    "training_repository_credentials_provider_arn": ((None,), "heft runs no containers"),
    "enable_infra_check": ((None, False), "heft has no instance health check"),
    "enable_remote_debug": ((None, False), "heft has no remote debugging; use heft logs and "
                            "heft diagnose"),
    "disable_output_compression": ((None, False, True), ""),  # heft never compresses: both fit
    "image_uri": ((None,), "heft runs no containers: give entry_point (a script), or use "
                  "Estimator(image_uri='heft-train') for heft's built-in trainer"),
    "checkpoint_local_path": ((None, "/opt/ml/checkpoints"), "heft gives every job its own "
                              "checkpoint folder, $SM_CHECKPOINT_DIR ($HEFT_HOME/jobs/<job>/"
                              "checkpoints), kept across spot restarts; a script writes there"),
    "compiler_config": ((None,), "heft has no training compiler"),
    "training_recipe": ((None,), "heft has no training recipes: give entry_point"),
    "recipe_overrides": ((None,), "heft has no training recipes"),
    "input_mode": ((None, "File"), "heft reads channels as local folders (File mode); FastFile "
                   "and Pipe are not supported"),
}

TUNER = {
    "max_runtime_in_seconds": ((None,), "heft tune has no limit on its own time; each trial "
                               "has the estimator's max_run"),
    "tags": ((None, [], ()), "heft's job database has no tags"),
    "completion_criteria_config": ((None,), "heft tune runs max_jobs trials; it has no "
                                   "target value or convergence stop"),
    "estimator_name": ((None,), "heft tunes one estimator"),
    "autotune": ((None, False), "heft needs explicit hyperparameter_ranges"),
    "hyperparameters_to_keep_static": ((None,), "used with autotune only, which heft lacks"),
}

FIT = {
    "experiment_config": ((None,), "heft has no experiments service; heft jobs lists the runs"),
}

TUNER_FIT = {
    "include_cls_metadata": ((None, False), "heft passes no estimator class metadata"),
    "estimator_kwargs": ((None,), "heft tunes one estimator"),
}


def _same(a, b):
    return a is b or (type(a) is type(b) and a == b)


def check(owner, table, given):
    """Raises ValueError naming the first argument of `given` (a dict) whose value `table`
    does not accept, TypeError for a name the table lacks."""
    for name, value in given.items():
        if name not in table:
            raise TypeError(f"{owner}() got an unexpected keyword argument '{name}'")
        accepted, why = table[name]
        if not any(_same(value, a) for a in accepted):
            raise ValueError(f"{owner}: {name}={value!r} is not supported by heft: {why}")
