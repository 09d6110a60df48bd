"""Zero-shot CLIP: "a photo of a {name}." prompts, nothing trained, nothing sent."""

from __future__ import annotations

from benchmark.backbone import Backbone
from benchmark.method import FederatedMethod
from benchmark.method_registration import register_method


@register_method("zeroshot")
class ZeroShotCLIP(FederatedMethod):
    """Frozen CLIP with hand-written prompts: the reference every method must beat."""

    frozen_image_features = True
    lr_schedule = "none: nothing trains"

    def __init__(self, backbone: Backbone, template: str = "a photo of a {}.") -> None:
        super().__init__(backbone)
        if "{}" not in template:
            raise ValueError(f"template must contain '{{}}' where the class name goes, got {template!r}")
        self.template = template

    def encode_classes(self, class_names):
        import torch.nn.functional as F

        return F.normalize(self.backbone.zero_shot_text_features(class_names, self.template), dim=-1)
