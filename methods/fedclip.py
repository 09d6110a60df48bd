"""FedCLIP: an attention adapter on the CLIP image embedding, federated.

Lu et al., "FedCLIP: Fast Generalization and Personalization for CLIP in Federated
Learning" (2023), in the version run inside the FedTPG harness by a FedMVP co-author
(cross-entropy over the client's classes; the original's symmetric contrastive loss and
Adam are not reproduced). With f the raw (unnormalized) CLIP image feature:

    a  = softmax(W2 tanh(W1 f + b1) + b2)     over the D feature dimensions
    f' = normalize(a * f)                     element-wise
    logits = scale * f' . normalize(t)^T      t: CLIP's "a photo of a {name}." features, fixed

The adapter is not homogeneous (tanh, softmax), so it must see the raw feature: the
method caches the *unnormalized* CLIP feature (its own feature-cache kind). The adapter
(PyTorch's default init; 525,312 parameters at D = 512) is uploaded and averaged; nothing
is personal. Optimizer: the federated harness's SGD lr 0.003, momentum 0.9, weight decay
1e-5, with its per-client cosine over rounds (`benchmark.optim.sgd_per_client_cosine`).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, full_precision
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from benchmark.prompts import FixedClassTexts, FrozenClassTexts


@register_method("fedclip")
class FedCLIP(FrozenClassTexts, FederatedMethod):
    """Softmax attention over the image embedding's dimensions; uploaded whole, fixed text."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = OPTIMIZER_RANGES
    upload_keys = ("adapter.*",)
    batched_training = True
    frozen_image_features = True  # the adapter runs in `classify`, on cached features
    image_feature_kind = "clip-unnormalized"

    def __init__(
        self,
        backbone: Backbone,
        template: str = "a photo of a {}.",
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        if "{}" not in template:
            raise ValueError(f"template must contain '{{}}' where the class name goes, got {template!r}")
        self.save_hyperparameters(ignore=["backbone"])
        dim = backbone.embed_dim
        self.adapter = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim), nn.Softmax(dim=-1))
        self._text = FixedClassTexts(backbone, template)

    def encode_images(self, images: Tensor) -> Tensor:
        return self.backbone.encode_image(images)  # raw: the adapter needs the feature's scale

    def classify(self, image_features: Tensor, class_features: Tensor) -> Tensor:
        with full_precision(image_features.device.type):  # the head and the logits in fp32
            f = image_features.float()
            attended = F.normalize(self.adapter(f) * f, dim=-1)
            return self.backbone.logit_scale * attended @ class_features.float().t()

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_per_client_cosine(self, self.adapter.parameters(), hp.lr, hp.momentum, hp.weight_decay)
