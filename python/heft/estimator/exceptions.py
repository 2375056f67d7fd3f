"""The SDK's exceptions (sagemaker.exceptions), raised by heft.estimator."""


class UnexpectedStatusException(ValueError):
    """A job ended in a status the caller did not allow (a Failed training or tuning job), as
    the cloud SDK raises it from `fit()` and `wait()`: the message names the job, its status
    and heft's failure reason."""

    def __init__(self, message, allowed_statuses, actual_status):
        self.allowed_statuses = allowed_statuses
        self.actual_status = actual_status
        super().__init__(message)


class HeftCommandError(RuntimeError):
    """A heft command exited non-zero; `returncode` and `stderr` are heft's."""

    def __init__(self, args, returncode, stderr):
        self.command = list(args)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"heft {' '.join(self.command)} exited {returncode}: {stderr}")
