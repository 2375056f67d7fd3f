"""Models as sequences of layers for the Pipeline tests (tests/python/pipeline*_test.py): the
test GPT of sharded_models.py (embeddings, blocks, a final norm and head) and a CNN, each an
nn.Sequential; the one-process reference; and the checks of a pipelined run against it."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import sharded_models as M


class Embeddings(nn.Module):
    """Token + position embeddings: token ids (batch, time) -> (batch, time, d)."""

    def __init__(self, d, vocab=M.VOCAB, ctx=M.CTX):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))


class Head(nn.Module):
    def __init__(self, d, vocab=M.VOCAB):
        super().__init__()
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        return self.head(self.ln(x))


def gpt(blocks=6, d=16, heads=2):
    torch.manual_seed(3)
    return nn.Sequential(Embeddings(d), *[M.Block(d, heads) for _ in range(blocks)], Head(d))


def cnn():
    """Convolutions, pooling, a flatten and two linear layers: shapes change along the model."""
    torch.manual_seed(4)
    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 3 * 3, 24), nn.ReLU(), nn.Linear(24, 5))


def tp_gpt(blocks=4, d=16, heads=4):
    """The GPT of tp_models.py (attention reading its widths from the projection, as tensor-
    parallel code must) as a sequence, untied: embeddings, blocks, head (vocabulary 64)."""
    import tp_models as TM
    torch.manual_seed(5)
    return nn.Sequential(Embeddings(d, TM.VOCAB, TM.CTX),
                         *[TM.Block(d, heads) for _ in range(blocks)], Head(d, TM.VOCAB))


# Megatron's plan for tp_gpt, by the layer's index in the sequence: the token embedding by
# vocabulary, attention and MLP pairs, the head colwise with its logits gathered.
TP_PLAN = {"0.wte": "vocab", "*.attn.qkv": "colwise", "*.attn.proj": "rowwise",
           "*.mlp.0": "colwise", "*.mlp.2": "rowwise", "*.head": "colwise"}
MODELS = {"gpt": gpt, "cnn": cnn, "tp_gpt": tp_gpt}


def tp_batch(step, rows):
    import tp_models as TM
    return TM.batch("gpt", step, rows)


def loss_of(name, out, y):
    if name == "tp_gpt":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return M.loss_of(name, out, y)


def loss_fn(name):
    return lambda out, y: loss_of(name, out, y)


def reference(name, steps, batch, lr):
    """One process on the global batch: the losses, the final parameters by layer, the model."""
    model = MODELS[name]()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = tp_batch(step, batch) if name == "tp_gpt" else M.batch(name, step, 0, batch)
        opt.zero_grad()
        loss = loss_of(name, model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [[p.detach().clone() for p in layer.parameters()] for layer in model], model


def relative(a, b):
    """The largest relative difference: |a - b| / |b| for losses, ||a - b|| / ||b|| for
    tensors."""
    if isinstance(a, list):
        return max([relative(x, y) for x, y in zip(a, b)] + [0.0])
    if isinstance(a, torch.Tensor):
        return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
    return abs(a - b) / max(abs(b), 1e-30)


def communication_batches(actions):
    """Runs of consecutive communication actions in a stage's list (what run_stage issues as
    one exchange each)."""
    batches, previous = 0, False
    for a in actions:
        comm = a[0] not in ("F", "B")
        batches += comm and not previous
        previous = comm
    return batches
