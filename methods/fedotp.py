"""FedOTP: a global and a local CoOp prompt matched to image patches by unbalanced OT.

Li et al., "Global and Local Prompts Cooperation via Optimal Transport for Federated
Learning" (CVPR 2024); behaviour from docs/methods.md and the authors' GLP_OT trainer.
Each class has N = 2 prompts: prompt 0 (global, FedAvg'd) and prompt 1 (local, personal).
An image is its M patch features; its logit for class c is the transport-weighted
similarity between the patches and the class's two prompt features.

State: the spec's ctx [2, 16, W] is stored as two Parameters, `global_ctx` (ctx[0]) and
`local_ctx` (ctx[1]), because the federation selects state by parameter name: only
`global_ctx` is uploaded. Counts are unchanged (2 x 16 x W trainable, 16 x W uploaded).

OT: the spec's iterations, in fp32 under any training precision, carried out on log u,
log v and log K with logsumexp -- the same iteration in exact arithmetic, where the literal
fp32 kernel exp(-cost/eps) under- and overflows for cosines below ~0.1 (random or weakly
aligned features) and the plan turns NaN.
The stop rule compares v at its true scale (~exp(cost/eps), astronomically large) with
thresh, as the authors' code does, so in practice max_iter is what stops the iteration, and
the row sums may exceed 1/M by a few percent after 100 iterations (columns are exact).

Optimizer: the authors' recipe (scripts/fedotp_few_shot.sh, configs/trainers/GLP_OT):
SGD lr 0.001 with Dassl's momentum 0.9 and weight decay 5e-4, "single_step" schedule whose
step falls at the end of the local epochs -- i.e. a constant lr within a client-round.

Memory: the OT works on [B, C, M, N] (ViT-B/16: M = 196) and frozen patch features are
cached per image as [M, D] fp32 (ViT-B/16: 196 x 512 x 4 B = 392 KiB per image, e.g.
~20 GB for a 50k-image test set); `cache_patch_features=False` re-encodes images instead.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark import host_values
from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.prompts import ContextPrompts

OTVariant = Literal["COT", "Sinkhorn"]  # the authors' names


def _true_scale_change(log_new: Tensor, log_old: Tensor) -> Tensor:
    """mean |exp(log_new) - exp(log_old)| in float64: the authors' stopping statistic, at the
    true scale of the scaling vector (which reaches ~exp(2 / eps); float64 holds it)."""
    return (log_new.double().exp() - log_old.double().exp()).abs().mean()


def unbalanced_ot_plan(
    cost: Tensor, a: Tensor, b: Tensor, eps: float = 0.01, max_iter: int = 100, thresh: float = 1e-3
) -> Tensor:
    """FedOTP's unbalanced OT ("COT"): the plan T [..., M, N] for cost [..., M, N].

    K = exp(-cost / eps); u = v = 1; repeat <= max_iter: u = min(a / (K v), 1);
    v = b / (K^T u); stop when mean |v - v_prev| (over the whole batch, as the authors do)
    < thresh; T = diag(u) K diag(v). The last update is on v, so the column sums equal b;
    the row sums are at most a up to the stopping tolerance. a [..., M], b [..., N].
    Iterated on log u, log v and log K (logsumexp), the same numbers the literal iteration
    gives in exact arithmetic, without its under- and overflow.
    """
    log_k = -cost / eps
    log_a, log_b = a.log(), b.log()

    def update(log_u: Tensor, log_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        log_u = (log_a - torch.logsumexp(log_k + log_v.unsqueeze(-2), dim=-1)).clamp(max=0.0)
        new_v = log_b - torch.logsumexp(log_k + log_u.unsqueeze(-1), dim=-2)
        return log_u, new_v, _true_scale_change(new_v, log_v)

    log_u, log_v = _iterate(update, torch.zeros_like(a), torch.zeros_like(b), max_iter, thresh)
    return torch.exp(log_u.unsqueeze(-1) + log_k + log_v.unsqueeze(-2))


def sinkhorn_plan(
    cost: Tensor, a: Tensor, b: Tensor, eps: float = 0.01, max_iter: int = 100, thresh: float = 1e-3
) -> Tensor:
    """Plain Sinkhorn (the authors' "Sinkhorn" option): u = a / (K v), v = b / (K^T u) from
    v = 1; stops, as their code does, when mean |u - u_prev| < thresh. Log domain, as above."""
    log_k = -cost / eps
    log_a, log_b = a.log(), b.log()

    def update(log_u: Tensor, log_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        new_u = log_a - torch.logsumexp(log_k + log_v.unsqueeze(-2), dim=-1)
        log_v = log_b - torch.logsumexp(log_k + new_u.unsqueeze(-1), dim=-2)
        return new_u, log_v, _true_scale_change(new_u, log_u)

    log_u, log_v = _iterate(update, torch.zeros_like(a), torch.zeros_like(b), max_iter, thresh)
    return torch.exp(log_u.unsqueeze(-1) + log_k + log_v.unsqueeze(-2))


def _iterate(update, log_u: Tensor, log_v: Tensor, max_iter: int, thresh: float) -> tuple[Tensor, Tensor]:
    """(log u, log v) after at most `max_iter` `update`s, stopping after the first whose
    change is below `thresh`. Where a host read waits for the device (CUDA), the stop is
    decided on the device instead of read every iteration: all `max_iter` updates run and
    the state freezes (`torch.where`, which selects bits) from the update that converged on,
    so the plan is the one the early stop gives, bit for bit (tests/methods/test_fedotp.py),
    without one sync per iteration."""
    if not host_values.reads_wait(log_u.device):
        for _ in range(max_iter):
            log_u, log_v, change = update(log_u, log_v)
            if change.item() < thresh:
                break
        return log_u, log_v
    done = torch.zeros((), dtype=torch.bool, device=log_u.device)
    for _ in range(max_iter):
        new_u, new_v, change = update(log_u, log_v)
        log_u, log_v = torch.where(done, log_u, new_u), torch.where(done, log_v, new_v)
        done = done | (change < thresh)
    return log_u, log_v


def transport_logits(
    patches: Tensor,
    prompts: Tensor,
    logit_scale: float,
    ot: OTVariant = "COT",
    top_percent: float = 0.8,
    eps: float = 0.01,
    thresh: float = 1e-3,
    max_iter: int = 100,
) -> Tensor:
    """logits [B, C] = scale * sum_mn T_mn sim_mn for normalized patches [B, M, D] and
    normalized prompt features [N, C, D]. The plan is computed without gradient and in
    fp32 whatever the ambient precision (in fp16/bf16 exp(-cost/eps) underflows to 0 and
    the plan turns NaN); gradient reaches the prompts through `sim` only."""
    device_type = patches.device.type
    with torch.autocast(device_type=device_type, enabled=False):
        sim = torch.einsum("bmd,ncd->bcmn", patches.float(), prompts.float())
        num_patches, num_prompts = sim.shape[-2], sim.shape[-1]
        a = sim.new_full(sim.shape[:-1], 1.0 / num_patches)
        sinkhorn = ot.lower() == "sinkhorn"
        mass = 1.0 if sinkhorn else min(1.0, top_percent)  # the authors' min(sum a, top_percent)
        b = sim.new_full((*sim.shape[:-2], num_prompts), mass / num_prompts)
        with torch.no_grad():
            solve = sinkhorn_plan if sinkhorn else unbalanced_ot_plan
            plan = solve(1.0 - sim.detach(), a, b, eps, max_iter, thresh)
        # Checked where reading it costs nothing; on CUDA a non-finite plan makes the logits
        # and the loss non-finite, which the client loop reports (NonFiniteLoss) unsynced.
        if not host_values.reads_wait(plan.device) and not torch.isfinite(plan).all():
            raise FloatingPointError(f"FedOTP's transport plan is not finite (eps={eps}); try a larger eps")
        return logit_scale * (plan * sim).sum(dim=(-2, -1))


@register_method("fedotp")
class FedOTP(FederatedMethod):
    """Global prompt (uploaded, FedAvg by n_i) + local prompt (personal), OT over patches."""

    tunable = {"lr": LogUniform.around(0.001)}  # around the paper's lr, the default below
    lr_schedule = "SGD at a constant lr (a fresh optimizer every client-round)"
    ranges = {
        **OPTIMIZER_RANGES,
        "n_ctx": Range(ge=1),
        "init_std": Range(ge=0),
        "top_percent": Range(gt=0, le=1),
        "eps": Range(gt=0),
        "max_iter": Range(ge=1),
    }
    upload_keys = ("global_ctx",)
    batched_evaluation = False  # Sinkhorn stops on a tolerance checked with .item(): per client
    frozen_image_features = True
    image_feature_kind = "patches"  # [M, D] per image, not the pooled feature

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        init_std: float = 0.02,
        ot: OTVariant = "COT",
        top_percent: float = 0.8,
        eps: float = 0.01,
        thresh: float = 1e-3,
        max_iter: int = 100,
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
        cache_patch_features: bool = True,
    ) -> None:
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        # Exact either way; False trades the [M, D]-per-image cache for re-encoding images.
        self.frozen_image_features = cache_patch_features
        self.prompts = ContextPrompts(backbone, n_ctx)
        width = backbone.text.width
        # ctx[0] and ctx[1] of the spec, drawn as one [2, n_ctx, W] tensor like the authors.
        ctx = torch.randn(2, n_ctx, width) * init_std
        self.global_ctx = nn.Parameter(ctx[0].clone())
        self.local_ctx = nn.Parameter(ctx[1].clone())

    def encode_images(self, images: Tensor) -> Tensor:
        # All patch tokens (CLS dropped) after ln_post and the projection, normalized.
        _, patches = self.backbone.encode_image_patches(images)
        return F.normalize(patches, dim=-1)

    def encode_classes(self, class_names) -> Tensor:
        """Normalized prompt features [2, C, D]: [0] global prompt, [1] local prompt."""
        names = list(class_names)
        num_classes = len(names)
        # One text-tower pass over 2C prompts: the C global ones, then the C local ones.
        ctx = torch.cat([self.global_ctx.expand(num_classes, -1, -1), self.local_ctx.expand(num_classes, -1, -1)])
        features = self.prompts.encode(ctx, names + names)
        return F.normalize(features, dim=-1).view(2, num_classes, -1)

    def classify(self, image_features: Tensor, class_features: Tensor) -> Tensor:
        hp = self.hparams
        return transport_logits(
            image_features,
            class_features,
            self.backbone.logit_scale,
            hp.ot,
            hp.top_percent,
            hp.eps,
            hp.thresh,
            hp.max_iter,
        )

    def configure_optimizers(self):
        hp = self.hparams
        params = [self.global_ctx, self.local_ctx]
        return torch.optim.SGD(params, lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
