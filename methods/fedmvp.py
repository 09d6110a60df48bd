"""FedMVP: visual prompts generated from each image and its candidate classes' attributes.

Singha et al., "FedMVP: Federated Multimodal Visual Prompt Tuning for Vision-Language
Models" (ICCV 2025). One global model, everything learned is uploaded and averaged (the
authors' harness uses the plain mean: run with `aggregation: uniform`).

Text side. Every class has K attribute descriptors (an attribute file, `data.attributes`).
Each becomes a sentence "{prefix} {class}, {suffix}which has {descriptor}" (`which_clause`
picks "which is" / "which" / "which has"), cut to 77 characters, and its normalized frozen
CLIP text feature e_kj is both a classifier weight and a context token.

Image side (the PromptFormer). The frozen patch embeddings E (with positions) are queries,
the projected context tokens A' = text_proj(e) keys and values of one cross-attention
block with a feed-forward (pre-norm on queries and keys only, no residual from the
queries; GEGLU feed-forward). Its output is average-pooled into `n_prompts` tokens that are
appended to the frozen image tower's input: [CLS; patches; prompts], no positions, once
before ln_pre. The class logit is scale x the mean over the class's K sentences of the
cosine (an average of similarities, not of embeddings). Loss: cross-entropy + alpha x
(1 - cos(prompted feature, frozen zero-shot feature of the batch, flipped as a whole
with probability 1/2)).

LoRA switch. Rank-r matrices on the three attention inputs (x + x A B). A client whose
loss falls below `lora_threshold` switches for good (a per-client buffer, never uploaded):
its cross-attention block freezes and the LoRA matrices train from its next forward on.
The fidelity switches choose between the paper's description and the released code:

  local_steps     paper: one step per mini-batch | code: one step per local epoch, on its
                  last mini-batch (the released loop's indentation keeps only that loss)
  lora_check      paper: the client's first local loss only | code: the last mini-batch's
                  loss of every round the client trains
  lora_trainable  paper: LoRA only | code: LoRA and text_proj (the code never freezes it)
  lora_at_eval    False (the code: evaluation never takes the LoRA branch) | True

What the code does identically in both readings is fixed here: the value tokens are not
layer-normed, B is initialized N(0, 0.02^2) like A (not zero), LoRA adds no alpha / r
scaling. Differences from the released code (besides it not running as released):
parameters stay fp32 (the code trains in fp16); every client-round builds a fresh SGD
(this suite's rule), so momentum does not carry over between a client's rounds; the
learning rate follows the authors' per-client cosine over rounds
(`benchmark.optim.sgd_per_client_cosine`, shared with FedTPG and the other baselines of
the FedTPG harness); classes are matched to the file by name, in the
dataset's class order (the code follows the file's key order and drops unmatched classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, full_precision, project
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from data.attributes import ClassAttributes, SentenceFrame

SENTENCE_CHARS = 77  # the code cuts sentences to 77 *characters* before tokenizing
Fidelity = Literal["paper", "code"]  # follow the paper's text or the authors' code


# -- text: attribute sentences -----------------------------------------------------------
def which_clause(descriptor: str) -> str:
    """The relative clause that attaches a descriptor to its class (case-sensitive prefix
    tests, in this order; "a..." covers articles and also words like "angular")."""
    if descriptor.startswith("a"):
        return "which is " + descriptor
    if descriptor.startswith(("has", "often", "typically", "may", "can")):
        return "which " + descriptor
    if descriptor.startswith("used"):
        return "which is " + descriptor
    return "which has " + descriptor


def attribute_sentence(prefix: str, class_name: str, suffix: str, descriptor: str) -> str:
    """ "{prefix} {class}, {suffix}{clause}", cut to its first 77 characters."""
    sentence = f"{prefix} {class_name}, {suffix}{which_clause(descriptor)}"
    return sentence[:SENTENCE_CHARS]


def attribute_logits(image_features: Tensor, sentence_features: Tensor, scale: float) -> Tensor:
    """[B, C]: scale x the mean over each class's K sentences of the cosine similarity.
    `image_features` [B, D] and `sentence_features` [C, K, D] are L2-normalized."""
    return scale * torch.einsum("bd,ckd->bck", image_features, sentence_features).mean(dim=-1)


def pool_prompts(tokens: Tensor, n_prompts: int) -> Tensor:
    """[B, M, W] -> [B, n_prompts, W]: adaptive average pooling over the token axis (raster
    order), e.g. 196 patches -> 4 means of 49 consecutive patches."""
    return F.adaptive_avg_pool1d(tokens.transpose(1, 2), n_prompts).transpose(1, 2)


@dataclass(frozen=True)
class ClassTexts:
    """What FedMVP needs about a class list (frozen, so computed once per list)."""

    sentences: Tensor  # [C, K, D] normalized sentence features: the classifier
    context: Tensor  # [C * K, D] normalized features the PromptFormer attends over


# -- modules -----------------------------------------------------------------------------
class GEGLU(nn.Module):
    """Split the last axis into halves (u, g) and return u * GELU(g)."""

    def forward(self, x: Tensor) -> Tensor:
        u, g = x.chunk(2, dim=-1)
        return u * F.gelu(g)


class PromptFormer(nn.Module):
    """One cross-attention block: A = MHA(LN_q(Q), LN_k(K), V); H = A + FFN(A)."""

    def __init__(self, width: int, heads: int, ffn_mult: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)  # queries
        self.norm_context = nn.LayerNorm(width)  # keys only: the values are not normalized
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        hidden = ffn_mult * width
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * hidden), GEGLU(), nn.Linear(hidden, width))

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        attended, _ = self.attn(self.norm(queries), self.norm_context(keys), values, need_weights=False)
        return attended + self.ffn(attended)


class InputLoRA(nn.Module):
    """Low-rank updates of the three attention inputs: x -> x + x A B (no scaling)."""

    NAMES = ("query", "key", "value")

    def __init__(self, width: int, rank: int, init_std: float = 0.02) -> None:
        super().__init__()
        for name in self.NAMES:
            self.register_parameter(f"{name}_A", nn.Parameter(torch.randn(width, rank) * init_std))
            self.register_parameter(f"{name}_B", nn.Parameter(torch.randn(rank, width) * init_std))

    def forward(self, x: Tensor, name: str) -> Tensor:
        return x + x @ getattr(self, f"{name}_A") @ getattr(self, f"{name}_B")


@register_method("fedmvp")
class FedMVP(FederatedMethod):
    """PromptFormer visual prompts from image patches x class-attribute text; LoRA switch."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = {
        **OPTIMIZER_RANGES,
        "n_prompts": Range(ge=1),
        "heads": Range(ge=1),
        "lora_rank": Range(ge=1),
        "flip_p": Range(ge=0, le=1),
    }
    upload_keys = ("text_proj.*", "promptformer.*", "lora.*")
    batched_evaluation = False  # whether a client uses its LoRA is a Python branch on its state
    uses_class_attributes = True

    def __init__(
        self,
        backbone: Backbone,
        n_prompts: int = 4,
        heads: int = 4,
        alpha: float = 10.0,
        lora_rank: int = 8,
        lora_threshold: float = 0.5,
        local_steps: Fidelity = "paper",
        lora_check: Fidelity = "paper",
        lora_trainable: Fidelity = "paper",
        lora_at_eval: bool = False,
        flip_p: float = 0.5,
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        width = backbone.vision.width
        if width % heads:
            raise ValueError(f"heads = {heads} must divide the image tower's width {width}")
        self.save_hyperparameters(ignore=["backbone"])
        self.automatic_optimization = False  # the step rule (per batch / last batch) is the method's
        self.text_proj = nn.Linear(backbone.embed_dim, width)
        self.promptformer = PromptFormer(width, heads)
        self.lora = InputLoRA(width, lora_rank)
        # Per-client, never uploaded: the switch. (The client's schedule position comes from
        # the simulator: `current_client.participations`.)
        self.register_buffer("use_lora", torch.zeros((), dtype=torch.bool))
        self._texts: dict[tuple[tuple[str, ...], SentenceFrame], ClassTexts] = {}
        self._losses_seen = 0

    # -- classes ---------------------------------------------------------------------------
    def set_class_attributes(self, attributes: ClassAttributes) -> None:
        super().set_class_attributes(attributes)
        self._texts.clear()

    def frame(self) -> SentenceFrame:
        """The sentence frame of the images at hand: their domain's on a multi-domain dataset
        (a client's own domain in training, the scored domain in evaluation), as the code
        picks it by the evaluated domain's name; else the dataset's."""
        return self._attributes().frame_for(self.images_domain)

    def sentences(self, class_names: Sequence[str]) -> list[list[str]]:
        """The K attribute sentences of each class, [C][K], in the frame of the images at hand."""
        attributes = self._attributes()
        frame = self.frame()
        return [
            [attribute_sentence(frame.prefix, name.replace("_", " "), frame.suffix, d) for d in descriptors]
            for name, descriptors in zip(class_names, attributes.of(class_names))
        ]

    def encode_classes(self, class_names: Sequence[str]) -> ClassTexts:
        key = (tuple(class_names), self.frame())
        if key not in self._texts:  # the text tower is frozen: once per class list and frame
            self._texts[key] = self._encode_texts(class_names)
        texts = self._texts[key]
        return ClassTexts(texts.sentences.to(self.device), texts.context.to(self.device))

    @torch.no_grad()
    def _encode_texts(self, class_names: Sequence[str]) -> ClassTexts:
        attributes = self._attributes()
        sentences = self.sentences(class_names)
        num_classes, per_class = len(sentences), len(sentences[0])
        flat = [s for row in sentences for s in row]
        encoded = F.normalize(self.backbone.encode_text(self.backbone.tokenize(flat)), dim=-1)
        sentence_features = encoded.view(num_classes, per_class, -1)
        if self.frame().kv_source == "descriptors":
            raw = [d[:SENTENCE_CHARS] for row in attributes.of(class_names) for d in row]
            context = F.normalize(self.backbone.encode_text(self.backbone.tokenize(raw)), dim=-1)
        else:
            context = encoded
        return ClassTexts(sentence_features, context)

    def _attributes(self) -> ClassAttributes:
        if self.class_attributes is None:
            raise RuntimeError("fedmvp needs class attributes: the run calls set_class_attributes before training")
        return self.class_attributes

    # -- images ----------------------------------------------------------------------------
    def encode_images(self, images: Tensor) -> Tensor:
        """The frozen input sequence [B, 1 + M, W]: class token and patch embeddings with
        their positions, before ln_pre (the prompts join it in `classify`)."""
        with torch.no_grad():
            return self.backbone.image_embeddings(images)

    @property
    def lora_active(self) -> bool:
        return bool(self.use_lora) and (self.training or self.hparams.lora_at_eval)

    def prompts(self, embedded: Tensor, texts: ClassTexts) -> Tensor:
        """[B, n_prompts, W]: the PromptFormer over patches (queries) x context (keys, values)."""
        patches = embedded[:, 1:]
        context = self.text_proj(texts.context.to(self.text_proj.weight.dtype))
        context = context.unsqueeze(0).expand(len(patches), -1, -1)
        queries, keys, values = patches, context, context
        if self.lora_active:
            queries, keys, values = (self.lora(t, n) for t, n in zip((queries, keys, values), InputLoRA.NAMES))
        return pool_prompts(self.promptformer(queries, keys, values), self.hparams.n_prompts)

    def prompted_features(self, embedded: Tensor, texts: ClassTexts) -> Tensor:
        """Normalized image features [B, D] of the frozen tower run on [CLS; patches; prompts]."""
        tokens = self.backbone.image_tower(embedded, prompts=self.prompts(embedded, texts))
        return F.normalize(project(tokens[:, 0], self.backbone.model.visual.proj), dim=-1)

    def classify(self, image_features: Tensor, class_features: ClassTexts) -> Tensor:
        return self._logits(self.prompted_features(image_features, class_features), class_features)

    def _logits(self, features: Tensor, texts: ClassTexts) -> Tensor:
        with full_precision(features.device.type):  # fp32 logits under any autocast
            return attribute_logits(features.float(), texts.sentences.float(), self.backbone.logit_scale)

    # -- training --------------------------------------------------------------------------
    def loss(self, images: Tensor, labels: Tensor) -> Tensor:
        """CE over the client's classes + alpha x (1 - mean cos(prompted, frozen zero-shot of a
        batch flipped as a whole with probability flip_p))."""
        texts = self.encode_classes(self.current_client.class_names)
        features = self.prompted_features(self.image_features(images), texts)
        logits = self._logits(features, texts)
        with torch.no_grad():
            view = images.flip(-1) if torch.rand(()) < self.hparams.flip_p else images
            zero_shot = F.normalize(self.backbone.encode_image(view), dim=-1)
        consistency = 1 - F.cosine_similarity(features, zero_shot.to(features.dtype), dim=-1, eps=1e-7).mean()
        return F.cross_entropy(logits, labels) + self.hparams.alpha * consistency

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int):
        hp = self.hparams
        last = batch_idx == self.trainer.num_training_batches - 1
        if hp.local_steps == "code" and not last:
            return None  # the released loop keeps only the last mini-batch's loss
        images, labels = batch
        loss = self.loss(images, labels)
        self.log("train_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=len(labels))
        self._lora_check(float(loss.detach()))
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        for parameter in self._frozen_now():  # e.g. the switch round: no step for the block
            parameter.grad = None
        optimizer.step()
        return loss.detach()

    def _lora_check(self, loss: float) -> None:
        first = self.current_client.participations == 0 and not self._losses_seen
        self._losses_seen += 1
        if bool(self.use_lora):
            return
        if self.hparams.lora_check == "paper" and not first:
            return  # the paper's "initial loss": the first loss of the client's first round
        if loss < self.hparams.lora_threshold:
            self.use_lora.fill_(True)  # for good: the flag is personal state, never reset

    def _frozen_now(self) -> list[nn.Parameter]:
        if not bool(self.use_lora):
            return list(self.lora.parameters())
        frozen = list(self.promptformer.parameters())
        if self.hparams.lora_trainable == "paper":
            frozen += list(self.text_proj.parameters())
        return frozen

    def on_train_start(self) -> None:
        self._losses_seen = 0

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_per_client_cosine(self, self.parameters(), hp.lr, hp.momentum, hp.weight_decay)

    def parameter_counts(self) -> dict[str, int]:
        counts = super().parameter_counts()
        size = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        block, proj, lora = size(self.promptformer), size(self.text_proj), size(self.lora)
        counts["lora_params"] = lora
        counts["trained_before_lora_switch"] = block + proj
        counts["trained_after_lora_switch"] = lora + (proj if self.hparams.lora_trainable == "code" else 0)
        return counts
