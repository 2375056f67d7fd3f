"""`TrainingInput` (sagemaker.inputs.TrainingInput): a channel's data as the cloud SDK names
it. heft reads a channel as a local folder: `s3_data` is a path or a file:// URI; the options
that only a cloud data source has are refused naming them unless left at their defaults."""
from ._uri import local_path

_DEFAULTS = {"distribution": (None, "FullyReplicated"), "compression": (None,),
             "content_type": (None,), "record_wrapping": (None,),
             "s3_data_type": ("S3Prefix",), "instance_groups": (None,), "input_mode": (None, "File"),
             "attribute_names": (None,), "target_attribute_name": (None,),
             "shuffle_config": (None,), "hub_access_config": (None,),
             "model_access_config": (None,)}
_WHY = {"distribution": "every host reads the whole folder (FullyReplicated); shard in the "
                        "script by RANK",
        "compression": "heft reads the files as they are",
        "content_type": "heft does not record a content type",
        "record_wrapping": "heft reads the files as they are",
        "s3_data_type": "a channel is a local folder",
        "instance_groups": "heft's clusters are homogeneous",
        "input_mode": "heft reads channels as local folders (File mode)"}


class TrainingInput:
    def __init__(self, s3_data, **kwargs):
        for name, value in kwargs.items():
            if name not in _DEFAULTS:
                raise TypeError(f"TrainingInput() got an unexpected keyword argument '{name}'")
            if value not in _DEFAULTS[name]:
                why = _WHY.get(name, "the cloud's data sources are not heft's")
                raise ValueError(f"TrainingInput: {name}={value!r} is not supported by heft: "
                                 f"{why}")
        self.s3_data = s3_data
        self.config = {"DataSource": {"FileUri": s3_data}}

    def local_uri(self, what):
        local_path(what, self.s3_data)  # refuses s3:// naming the channel
        return self.s3_data

    def __repr__(self):
        return f"TrainingInput({self.s3_data!r})"
