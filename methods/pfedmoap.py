"""pFedMoAP: a local CoOp prompt mixed with other clients' prompts by a local attention gate.

Luo et al., "Mixture of Experts Made Personalized: Federated Prompt Learning for
Vision-Language Models" (ICLR 2025); behaviour from docs/methods.md and the authors'
trainer (`trainers/pfedmoap.py`, `federated_main.py`; read through a public fork).

Experts. Each client keeps a local prompt `ctx` [n_ctx, W] (uploaded) and a gate (never
leaves the client). Each round it downloads the FedAvg of the round's prompts (it
re-initializes `ctx`, as the authors do) and K-1 non-local prompts: other clients' latest
uploads from the server's bank. They are state, not hidden attributes: the buffer
`experts` [K-1, n_ctx, W] holds them and `expert_count` says how many rows are valid, so
they travel in the download, are counted in its bytes (the whole fixed-size buffer: rows
beyond `expert_count` are zeros), and are checkpointed with the client.

Selection ("nearest", the authors' default): the K-1 other clients whose latest prompt is
closest in L2 to this client's previous prompt (its own bank entry), ties by client id.
The authors kept distances in a list and mapped list positions back to client ids wrongly
beyond 10 clients; here everything is keyed by client id. "random": a fixed random order
of the candidates per client, seeded from the run seed (the authors shuffled the client
ids once at start-up); deterministic, independent of the order clients are run in.
A client in its first round has no previous prompt and gets no experts (the authors
"train only the local prompt the first time a client is selected"): logits = local logits.
The bank is the previous rounds' uploads; the authors' sequential loop also let a client
see prompts uploaded earlier in the same round, which made results depend on client order.

Gate (the authors' MultiheadAttention): d = D / pool_stride (ViT-B/16: 512 / 4 = 128),
pool(x) = x[..., ::pool_stride], four d x d projections with bias, `gate_heads` heads,
attention = softmax(gate_scale * Q K^T) with gate_scale = 10 replacing 1/sqrt(d_k) and no
dropout (their module takes a dropout argument but never applies it). For image b and
class c: query = pool(f_b); keys = values = [pool(t_c^local), pool(t_c^1), ...] (the
experts' text features computed without gradient); G_bc = W_o(heads(attention)).
logits_bc = local_weight * s * f_b . t_c^local + s * pool(f_b) . G_bc, s = CLIP's logit scale.

Optimizers: prompt SGD lr 0.002 with cosine decay and `warmup_epochs` epochs at the
constant 1e-5 (CoOp / Dassl); gate SGD lr 0.01, constant within a client-round. Both with
Dassl's momentum 0.9 and weight decay 5e-4. Lightning's automatic optimization drives one
optimizer, so this is one SGD with two parameter groups and a LambdaLR with one lambda per
group: SGD's update of a group depends only on that group's lr and state, so it is the
same as two SGD optimizers. Fresh per client-round (the authors' optimizers and schedulers
persisted across clients and rounds; their gate lr decayed once per round). With a single
local epoch the warm-up is skipped: a 1-epoch warm-up would leave the prompt at 1e-5 for
the whole client-round.

Evaluation after local training (`evaluate_after_download = False`): the authors test each
selected client right after its local training, with its own trained prompt, gate and the
experts it trained with. Evaluating after the final download would replace the trained
local prompt by the FedAvg prompt, which is not what pFedMoAP reports. (Under partial
participation the authors re-select experts for clients not sampled in the last round;
here such a client is evaluated as its last participation left it.) A client that never
trained gets the final download like every method's (the simulator's rule): the FedAvg
prompt and, having no previous prompt, no experts -- the authors load the global prompt
for such clients too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark import shortcuts
from benchmark.backbone import Backbone
from benchmark.host_values import HostMemo
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range, State
from benchmark.method_registration import register_method
from benchmark.optim import constant_schedule, warmup_and_total_steps, warmup_then_cosine
from benchmark.prompts import ContextPrompts


@dataclass(frozen=True)
class MoAPClassFeatures:
    """What `classify` needs about a class set."""

    local: Tensor  # [C, D] normalized text features of the local prompt
    experts: Tensor | None  # [n, C, d] pooled normalized expert text features (no grad); None: no experts


class AttentionGate(nn.Module):
    """Multi-head attention from a pooled image feature to each class's K prompt features."""

    def __init__(self, dim: int, heads: int, scale: float) -> None:
        super().__init__()
        self.heads = heads
        self.scale = scale
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """query [B, d], keys = values [C, K, d] -> mixed features G [B, C, d]."""
        batch, dim = query.shape
        classes, experts, _ = keys.shape
        head_dim = dim // self.heads
        q = self.q(query).view(batch, self.heads, head_dim)
        k = self.k(keys).view(classes, experts, self.heads, head_dim)
        v = self.v(keys).view(classes, experts, self.heads, head_dim)
        weights = (self.scale * torch.einsum("bhe,ckhe->bchk", q, k)).softmax(dim=-1)
        mixed = torch.einsum("bchk,ckhe->bche", weights, v).reshape(batch, classes, dim)
        return self.out(mixed)


# Host reads made once per loaded state, not in every step (`benchmark.host_values`).
_COUNT = HostMemo(lambda count: int(count))  # how many experts are valid
_WRITTEN = HostMemo(lambda tensor: object())  # a new token whenever the tensor is written or replaced


@register_method("pfedmoap")
class PFedMoAP(FederatedMethod):
    """Local CoOp prompt + attention gate over K-1 downloaded non-local prompts."""

    tunable = {"lr": LogUniform.around(0.002)}  # around the paper's lr, the default below
    lr_schedule = (
        "SGD; prompt: warmup_epochs local epochs at warmup_lr (none with 1 local epoch), then cosine from lr to 0 "
        "over the rest of each client-round's steps (restarted every round); gate: constant gate_lr"
    )
    ranges = {
        **OPTIMIZER_RANGES,
        "n_ctx": Range(ge=1),
        "init_std": Range(ge=0),
        "num_experts": Range(ge=1),  # the local prompt counts
        "pool_stride": Range(ge=1),
        "gate_heads": Range(ge=1),
        "warmup_epochs": Range(ge=0),
        "warmup_lr": Range(gt=0),
        "gate_lr": Range(gt=0),
    }
    upload_keys = ("ctx",)
    batched_evaluation = False  # how many downloaded experts are valid is read with int(expert_count)
    frozen_image_features = True
    evaluate_after_download = False

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        init_std: float = 0.02,
        num_experts: int = 10,
        selection: Literal["nearest", "random"] = "nearest",
        pool_stride: int = 4,
        gate_heads: int = 8,
        gate_scale: float = 10.0,
        local_weight: float = 0.5,
        lr: float = 0.002,
        warmup_epochs: int = 1,
        warmup_lr: float = 1e-5,
        gate_lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__(backbone)
        embed_dim = backbone.embed_dim
        if embed_dim % pool_stride:
            raise ValueError(
                f"pool_stride must divide the backbone's embed dim {embed_dim}, got {pool_stride} "
                "(ViT-B/16: 512 / 4 = 128 as in the paper)"
            )
        gate_dim = embed_dim // pool_stride
        if gate_dim % gate_heads:
            raise ValueError(
                f"gate_heads must divide the gate dim {gate_dim} (= embed dim {embed_dim} / pool_stride "
                f"{pool_stride}), got {gate_heads}"
            )
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        self.ctx = nn.Parameter(torch.randn(n_ctx, backbone.text.width) * init_std)
        self.gate = AttentionGate(gate_dim, gate_heads, gate_scale)
        self.register_buffer("experts", torch.zeros(num_experts - 1, n_ctx, backbone.text.width))
        # Shape [1], not a 0-dim scalar: state tensors are fingerprinted as bytes.
        self.register_buffer("expert_count", torch.zeros(1, dtype=torch.long))
        # The "random" selection's order, fixed by the run seed (the method is built seeded).
        self.selection_seed = int(torch.randint(0, 2**31 - 1, ()))
        # Per method object, i.e. per run (one precision, TF32, compile and shortcut setting):
        # keyed by the class list, dropped when the experts are written.
        self._expert_cache: dict[tuple[str, ...], Tensor] = {}
        self._expert_cache_source: tuple | None = None  # what the memo was computed from

    def on_client_state_loaded(self) -> None:
        _COUNT(self.expert_count)  # read on the host here, once per loaded state, not in a step

    # -- computation --------------------------------------------------------------------
    def pool(self, x: Tensor) -> Tensor:
        return x[..., :: self.hparams.pool_stride]

    def encode_classes(self, class_names: Sequence[str]) -> MoAPClassFeatures:
        local = F.normalize(self.prompts.encode(self.ctx, class_names), dim=-1)
        experts = self.expert_features(class_names) if _COUNT(self.expert_count) > 0 else None
        return MoAPClassFeatures(local, experts)

    def classify(self, image_features: Tensor, class_features: MoAPClassFeatures) -> Tensor:
        scale = self.backbone.logit_scale
        local_logits = scale * image_features @ class_features.local.t()
        if class_features.experts is None:
            return local_logits
        query = self.pool(image_features)  # [B, d]
        keys = torch.cat([self.pool(class_features.local).unsqueeze(0), class_features.experts.to(query.dtype)])
        mixed = self.gate(query, keys.transpose(0, 1))  # keys [C, K, d] -> G [B, C, d]
        gated_logits = scale * torch.einsum("bd,bcd->bc", query, mixed)
        return self.hparams.local_weight * local_logits + gated_logits

    @torch.no_grad()
    def expert_features(self, class_names: Sequence[str]) -> Tensor:
        """Pooled normalized text features [n, C, d] of the valid experts. Memoized per class
        list while the experts are unchanged (they are fixed during a client-round, so the
        text tower runs n times per class list, not n times per step); without shortcuts
        (`benchmark.shortcuts`) encoded at every call, the plain path."""
        experts = self.experts[: _COUNT(self.expert_count)]
        if not shortcuts.active():
            return self._encode_experts(experts, class_names)
        # The experts change only when a state is loaded (an in-place copy, which bumps their
        # version) or the buffer is replaced: the memo is dropped then, without reading the
        # experts on the host in a step (a sync on CUDA). The features are a function of the
        # experts: recomputing them for an equal copy gives the same bits.
        source = (_WRITTEN(self.experts), experts.shape[0])
        if source != self._expert_cache_source:
            self._expert_cache = {}
            self._expert_cache_source = source
        key = tuple(class_names)
        if key not in self._expert_cache:
            self._expert_cache[key] = self._encode_experts(experts, class_names)
        return self._expert_cache[key]

    def _encode_experts(self, experts: Tensor, class_names: Sequence[str]) -> Tensor:
        return torch.stack([self.pool(F.normalize(self.prompts.encode(e, class_names), dim=-1)) for e in experts])

    # -- federation ---------------------------------------------------------------------
    def download(self, client_id: int, aggregate: State, bank: Mapping[int, State]) -> State:
        """The round's FedAvg prompt (re-initializes `ctx`) and this client's K-1 experts."""
        selected = self.select_experts(client_id, bank)
        experts = torch.zeros_like(self.experts)
        for row, expert_id in enumerate(selected):
            experts[row] = bank[expert_id]["ctx"].to(experts)
        received = {k: v for k, v in aggregate.items() if k == "ctx"}
        received["experts"] = experts
        received["expert_count"] = torch.tensor([len(selected)], dtype=torch.long)
        return received

    def select_experts(self, client_id: int, bank: Mapping[int, State]) -> list[int]:
        """Client ids of this client's non-local experts, at most K-1, best first."""
        if client_id not in bank:  # first participation: no previous prompt, no experts
            return []
        candidates = sorted(cid for cid in bank if cid != client_id)
        if self.hparams.selection == "nearest":
            own = bank[client_id]["ctx"].double()
            distance = {cid: float(torch.linalg.vector_norm(bank[cid]["ctx"].double() - own)) for cid in candidates}
            ranked = sorted(candidates, key=lambda cid: (distance[cid], cid))
        else:
            ranked = sorted(candidates, key=lambda cid: self._random_rank(client_id, cid))
        return ranked[: self.experts.shape[0]]

    def _random_rank(self, client_id: int, candidate: int) -> int:
        return int(np.random.SeedSequence([self.selection_seed, client_id, candidate]).generate_state(1)[0])

    # -- optimization -------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        optimizer = torch.optim.SGD(
            [{"params": [self.ctx], "lr": hp.lr}, {"params": list(self.gate.parameters()), "lr": hp.gate_lr}],
            lr=hp.lr,
            momentum=hp.momentum,
            weight_decay=hp.weight_decay,
        )
        warmup_steps, steps = warmup_and_total_steps(self, hp.warmup_epochs)
        prompt_schedule = warmup_then_cosine(warmup_steps, steps, hp.warmup_lr / hp.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [prompt_schedule, constant_schedule])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
