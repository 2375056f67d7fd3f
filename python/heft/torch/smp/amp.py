"""smp.amp.GradScaler on heft: the CPU runs fp32 or bf16, whose range needs no loss scaling, so
the scaler scales by 1: scale() returns the loss, step() steps the optimizer, update() and
unscale_() do nothing (torch's GradScaler disabled, which keeps its state_dict API)."""
import torch


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("cpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=False)
